// stitchd assembled: the stores, the compile pool, the gRPC server on a Unix socket and a
// TCP port, the metrics endpoint, and the order in which they start and stop.
//
// Start takes a lock on the data directory and one beside the socket before binding, so a
// second daemon on either fails at start with a message naming the first one's pid.
//
// Thread-safety: Start and Shutdown are called from one thread (main); the accessors are
// safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stitch/base/status.h"
#include "stitch/daemon/config.h"

namespace stitch::daemon {

class Daemon {
 public:
  // Starts serving with `config` (already validated by ParseCommandLine). Returns
  // FAILED_PRECONDITION when another daemon holds the data dir or socket, UNAVAILABLE when
  // a port cannot be bound or the store cannot be opened.
  static StatusOr<std::unique_ptr<Daemon>> Start(const DaemonConfig& config);
  virtual ~Daemon() = default;

  // Stops taking requests, lets in-flight ones finish (compiles included, up to
  // config.drain_seconds for RPCs), saves the persistent totals and closes RocksDB.
  // Idempotent; the destructor calls it.
  virtual void Shutdown() = 0;

  // The bound TCP port of the gRPC server, or 0 when TCP is disabled.
  virtual int grpc_port() const = 0;
  // The bound port of /metrics and /healthz, or 0 when disabled.
  virtual int metrics_port() const = 0;
};

// The file Start writes into the data dir once it serves: the pid, the socket path and
// the bound ports as JSON, so scripts and tests can find a daemon started on port 0.
std::string RuntimeInfoPath(const DaemonConfig& config);

}  // namespace stitch::daemon
