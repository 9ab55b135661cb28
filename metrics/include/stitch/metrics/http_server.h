// The metrics endpoint: HTTP/1.1 on Boost.Beast serving
//   GET /metrics  the registry in text format 0.0.4
//   GET /healthz  "ok" (200) while `healthy()` returns true, "unhealthy" (503) otherwise
// and 404 for other paths, 405 for other methods. It runs one Asio thread of its own.
//
// Requests that do not parse, or whose header exceeds 8 KiB, get a 400 (431) and the
// connection is closed.
//
// Thread-safety: Start, port and Stop may be called from any thread; Stop is idempotent.
// Stop must not be called from within `healthy` (it runs on the server thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stitch/base/status.h"
#include "stitch/metrics/registry.h"

namespace stitch::metrics {

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 9464;  // 0 binds a free port (tests)
  // A connection that sends no complete request (or does not take its response) within
  // this time is closed, so idle or stalled clients do not hold sockets forever.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(30)};
  // Connections beyond this many are accepted and closed at once; a scraper needs one.
  int max_connections = 64;
};

class HttpServer {
 public:
  // Binds and starts serving. Returns UNAVAILABLE naming address:port when it cannot bind,
  // INVALID_ARGUMENT when `options.address` is neither an IP address nor a host name that
  // resolves (a name binds its first address). `registry` must outlive the server;
  // `healthy` runs on the server thread (an empty function means healthy).
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                     const Registry& registry,
                                                     std::function<bool()> healthy);
  // The concrete server's destructor calls Stop.
  virtual ~HttpServer() = default;

  // Returns the bound port (the chosen one when options.port was 0).
  virtual uint16_t port() const = 0;

  // Stops accepting, closes connections and joins the server thread.
  virtual void Stop() = 0;
};

}  // namespace stitch::metrics
