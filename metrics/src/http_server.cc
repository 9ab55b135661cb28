#include "stitch/metrics/http_server.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/basic_resolver.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

namespace stitch::metrics {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// A scrape request is a request line and a few headers; anything near this is not one.
constexpr uint32_t kHeaderLimit = 8 * 1024;
// GET and HEAD carry no body; a small one is read so that a POST still gets its 405.
constexpr uint64_t kBodyLimit = 16 * 1024;
// After accept fails (e.g. out of descriptors), wait before trying again rather than spin.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

constexpr const char* kPlainText = "text/plain; charset=utf-8";

std::string FormatEndpoint(const std::string& address, uint16_t port) {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

class BeastHttpServer;

// One connection: reads requests one after another (keep-alive) and writes the answers.
// Lives in the shared_ptrs held by its pending handlers; the server keeps a weak_ptr.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, BeastHttpServer* server, uint64_t id)
      : stream_(std::move(socket)), server_(server), id_(id) {}

  void Start() { ReadRequest(); }

  // Only once the server thread has stopped: closes the socket without a handler.
  void CloseFromStop() {
    finished_ = true;
    stream_.socket().close(ignored_);
  }

 private:
  void ReadRequest();
  void OnRead(beast::error_code ec, std::size_t bytes);
  void Write(http::response<http::string_body> response, bool close_after);
  void OnWrite(beast::error_code ec, std::size_t bytes);
  void Finish();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  // A parser serves one message only, so each request gets a fresh one.
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  BeastHttpServer* server_;
  uint64_t id_;
  bool close_after_write_ = false;
  bool finished_ = false;
  beast::error_code ignored_;
};

class BeastHttpServer final : public HttpServer {
 public:
  BeastHttpServer(const HttpServerOptions& options, const Registry& registry,
                  std::function<bool()> healthy)
      : options_(options),
        registry_(registry),
        healthy_(std::move(healthy)),
        work_(asio::make_work_guard(ioc_)),
        acceptor_(ioc_),
        retry_timer_(ioc_) {}

  ~BeastHttpServer() override { Stop(); }

  Status Listen() {
    beast::error_code ec;
    const std::string where = FormatEndpoint(options_.address, options_.port);
    tcp::endpoint endpoint;
    if (const asio::ip::address address = asio::ip::make_address(options_.address, ec); !ec) {
      endpoint = tcp::endpoint(address, options_.port);
    } else {
      // A host name ("localhost"): bind its first address.
      tcp::resolver resolver(ioc_);
      const auto results =
          resolver.resolve(options_.address, std::to_string(options_.port),
                           tcp::resolver::passive | tcp::resolver::numeric_service, ec);
      if (ec || results.empty()) {
        return InvalidArgument("metrics endpoint: cannot resolve " + where + ": " +
                               (ec ? ec.message() : std::string("no address")));
      }
      endpoint = results.begin()->endpoint();
    }
    auto fail = [&](const char* what) {
      return Unavailable("metrics endpoint: cannot " + std::string(what) + " " + where + ": " +
                         ec.message());
    };
    if (acceptor_.open(endpoint.protocol(), ec)) return fail("open a socket for");
    // Lets a restarted daemon bind while old connections sit in TIME_WAIT; Linux still
    // refuses a second listener on the same port.
    if (acceptor_.set_option(asio::socket_base::reuse_address(true), ec)) {
      return fail("set SO_REUSEADDR on");
    }
    if (acceptor_.bind(endpoint, ec)) return fail("bind");
    if (acceptor_.listen(asio::socket_base::max_listen_connections, ec)) return fail("listen on");
    const tcp::endpoint local = acceptor_.local_endpoint(ec);
    if (ec) return fail("read the local address of");
    port_ = local.port();
    return Status::Ok();
  }

  void Run() {
    Accept();
    thread_ = std::thread([this] {
      // A handler that throws (allocation failure, a throwing `healthy`) must not take the
      // daemon down with it; Asio allows run() to be called again after an exception.
      for (;;) {
        try {
          ioc_.run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "stitch::metrics: HTTP handler failed: %s\n", e.what());
        } catch (...) {
          std::fprintf(stderr, "stitch::metrics: HTTP handler failed\n");
        }
      }
    });
  }

  uint16_t port() const override { return port_; }

  void Stop() override {
    std::lock_guard lock(stop_mu_);
    if (!thread_.joinable()) return;
    work_.reset();
    ioc_.stop();
    thread_.join();
    // The io_context no longer runs, so its objects may be touched from this thread.
    // Pending handlers are dropped with the io_context, and the sessions with them.
    beast::error_code ec;
    acceptor_.close(ec);
    retry_timer_.cancel();
    for (auto& [id, weak] : sessions_) {
      if (const std::shared_ptr<Session> session = weak.lock()) session->CloseFromStop();
    }
    sessions_.clear();
  }

  // Called on the server thread by sessions.
  http::response<http::string_body> Handle(const http::request<http::string_body>& request);
  std::chrono::milliseconds idle_timeout() const { return options_.idle_timeout; }
  void Forget(uint64_t id) { sessions_.erase(id); }

 private:
  void Accept() {
    acceptor_.async_accept(
        [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
  }

  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      retry_timer_.expires_after(kAcceptRetryDelay);
      retry_timer_.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    if (sessions_.size() >= static_cast<size_t>(std::max(options_.max_connections, 1))) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      const uint64_t id = next_session_id_++;
      auto session = std::make_shared<Session>(std::move(socket), this, id);
      sessions_.emplace(id, session);
      session->Start();
    }
    Accept();
  }

  const HttpServerOptions options_;
  const Registry& registry_;
  const std::function<bool()> healthy_;
  // Declared first so that it is destroyed last: the pending handlers it drops own the
  // sessions, whose sockets belong to it.
  asio::io_context ioc_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions_;  // server thread only
  uint64_t next_session_id_ = 0;
  uint16_t port_ = 0;
  std::mutex stop_mu_;
  std::thread thread_;
};

http::response<http::string_body> BeastHttpServer::Handle(
    const http::request<http::string_body>& request) {
  http::response<http::string_body> response;
  response.version(request.version());
  response.keep_alive(request.keep_alive());
  response.set(http::field::content_type, kPlainText);

  const beast::string_view raw_target = request.target();
  std::string_view target(raw_target.data(), raw_target.size());
  if (const size_t query = target.find('?'); query != std::string_view::npos) {
    target = target.substr(0, query);
  }
  const bool known = target == "/metrics" || target == "/healthz";
  const bool head = request.method() == http::verb::head;
  if (!known) {
    response.result(http::status::not_found);
    response.body() = "not found\n";
  } else if (request.method() != http::verb::get && !head) {
    response.result(http::status::method_not_allowed);
    response.set(http::field::allow, "GET, HEAD");
    response.body() = "method not allowed\n";
  } else if (target == "/metrics") {
    response.result(http::status::ok);
    response.set(http::field::content_type, kTextContentType);
    response.body() = registry_.Serialize();
  } else if (!healthy_ || healthy_()) {
    response.result(http::status::ok);
    response.body() = "ok\n";
  } else {
    response.result(http::status::service_unavailable);
    response.body() = "unhealthy\n";
  }
  if (head) {
    // The length the GET would have, without its body.
    const size_t length = response.body().size();
    response.body().clear();
    response.content_length(length);
  } else {
    response.prepare_payload();
  }
  return response;
}

void Session::ReadRequest() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(kBodyLimit);
  stream_.expires_after(server_->idle_timeout());
  http::async_read(stream_, buffer_, *parser_,
                   beast::bind_front_handler(&Session::OnRead, shared_from_this()));
}

void Session::OnRead(beast::error_code ec, std::size_t /*bytes*/) {
  if (ec == http::error::header_limit) {
    http::response<http::string_body> response{http::status::request_header_fields_too_large, 11};
    response.set(http::field::content_type, kPlainText);
    response.body() = "request header too large\n";
    response.keep_alive(false);
    response.prepare_payload();
    Write(std::move(response), true);
    return;
  }
  if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    http::response<http::string_body> response{http::status::bad_request, 11};
    response.set(http::field::content_type, kPlainText);
    response.body() = "bad request\n";
    response.keep_alive(false);
    response.prepare_payload();
    Write(std::move(response), true);
    return;
  }
  if (ec) {
    // End of stream, timeout, reset, or the server stopping: nothing left to answer.
    Finish();
    return;
  }
  http::response<http::string_body> response = server_->Handle(parser_->get());
  const bool close = response.need_eof();
  Write(std::move(response), close);
}

void Session::Write(http::response<http::string_body> response, bool close_after) {
  response_ = std::move(response);
  close_after_write_ = close_after;
  // The same bound applies to a client that stops reading its response.
  stream_.expires_after(server_->idle_timeout());
  http::async_write(stream_, response_,
                    beast::bind_front_handler(&Session::OnWrite, shared_from_this()));
}

void Session::OnWrite(beast::error_code ec, std::size_t /*bytes*/) {
  if (ec || close_after_write_) {
    Finish();
    return;
  }
  response_ = {};
  ReadRequest();
}

void Session::Finish() {
  if (finished_) return;
  finished_ = true;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored_);
  stream_.socket().close(ignored_);
  server_->Forget(id_);
}

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                        const Registry& registry,
                                                        std::function<bool()> healthy) {
  auto server = std::make_unique<BeastHttpServer>(options, registry, std::move(healthy));
  STITCH_RETURN_IF_ERROR(server->Listen());
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace stitch::metrics
