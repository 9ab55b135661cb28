// One blocking hiredis connection to one cluster node, authenticated when it opens.
//
// Thread-safety: none; a connection is used by one thread at a time (the pool hands it
// out). Errors: a call that fails on the socket (refused, reset, timed out) leaves the
// connection broken(), and its owner must drop it: a half-read reply cannot be resynced.
#pragma once

#include <memory>
#include <vector>

#include "stitch/cache/redis_cluster.h"

struct redisContext;

namespace stitch::cache::redis {

class Connection {
 public:
  // Connects to `node` within the deadline (and options.connect_timeout), then AUTHs when a
  // password is set. Returns UNAVAILABLE naming the node when it cannot connect,
  // DEADLINE_EXCEEDED when the deadline passes, FAILED_PRECONDITION when AUTH is refused.
  static StatusOr<std::unique_ptr<Connection>> Open(const NodeAddress& node,
                                                    const ClusterOptions& options,
                                                    Deadline deadline);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends `commands` in one write and reads one reply each. Returns the replies, or
  // DEADLINE_EXCEEDED / UNAVAILABLE naming the node when the socket fails or times out
  // (the connection is then broken()).
  StatusOr<std::vector<Reply>> Exchange(const std::vector<Command>& commands, Deadline deadline);

  bool broken() const { return broken_; }
  const NodeAddress& node() const { return node_; }

 private:
  Connection(NodeAddress node, redisContext* context) : node_(std::move(node)), context_(context) {}
  Status SocketError(const char* what);

  NodeAddress node_;
  redisContext* context_;
  bool broken_ = false;
};

}  // namespace stitch::cache::redis
