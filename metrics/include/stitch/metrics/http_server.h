// The metrics endpoint: HTTP/1.1 on Boost.Beast serving
//   GET /metrics  the registry in text format 0.0.4
//   GET /healthz  "ok" (200) while `healthy()` returns true, "unhealthy" (503) otherwise
// and 404 for other paths, 405 for other methods. It runs one Asio thread of its own.
//
// Thread-safety: Start, port and Stop may be called from any thread; Stop is idempotent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stitch/compiler/status.h"
#include "stitch/metrics/registry.h"

namespace stitch::metrics {

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 9464;  // 0 binds a free port (tests)
};

class HttpServer {
 public:
  // Binds and starts serving. Returns UNAVAILABLE naming the address when it cannot bind.
  // `registry` must outlive the server.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                     const Registry& registry,
                                                     std::function<bool()> healthy);
  virtual ~HttpServer() = default;

  // Returns the bound port (the chosen one when options.port was 0).
  virtual uint16_t port() const = 0;

  // Stops accepting, closes connections and joins the server thread.
  virtual void Stop() = 0;
};

}  // namespace stitch::metrics
