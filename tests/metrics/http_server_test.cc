#include "stitch/metrics/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "metrics/http_client.h"

namespace stitch::metrics {
namespace {

using test_http::Fetch;
using test_http::HttpResponse;
using test_http::TestConnection;

HttpServerOptions Loopback() {
  HttpServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  return options;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.AddCounter("test_requests_total", "Requests.")
        .Add({{"path", "a\"b\\c\nd"}})
        .Increment(7);
    registry_.AddGauge("test_level", "Level.").Add().Set(0.5);
    registry_.AddHistogram("test_seconds", "Seconds.", {0.1, 1}).Add().Observe(0.2);
    Start(Loopback());
  }

  void Start(const HttpServerOptions& options) {
    auto server = HttpServer::Start(options, registry_, [this] { return healthy_.load(); });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_NE(server_->port(), 0);
  }

  Registry registry_;
  std::atomic<bool> healthy_{true};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ServesMetrics) {
  const std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/metrics");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(response->header("content-type"), kTextContentType);
  EXPECT_EQ(response->body, registry_.Serialize());
  EXPECT_NE(response->body.find("test_requests_total{path=\"a\\\"b\\\\c\\nd\"} 7\n"),
            std::string::npos);
}

TEST_F(HttpServerTest, EachScrapeSeesCurrentValues) {
  registry_.AddGauge("test_level", "Level.").Add().Set(3);
  std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/metrics");
  ASSERT_TRUE(response.has_value());
  EXPECT_NE(response->body.find("\ntest_level 3\n"), std::string::npos) << response->body;
  registry_.AddGauge("test_level", "Level.").Add().Set(4);
  response = Fetch(server_->port(), "GET", "/metrics?debug=1");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_NE(response->body.find("\ntest_level 4\n"), std::string::npos) << response->body;
}

TEST_F(HttpServerTest, HealthzFollowsTheFlag) {
  std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "ok\n");
  healthy_ = false;
  response = Fetch(server_->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(response->body, "unhealthy\n");
  healthy_ = true;
  response = Fetch(server_->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, UnknownPathIs404) {
  const std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/metricsx");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 404);
  const std::optional<HttpResponse> root = Fetch(server_->port(), "GET", "/");
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->status, 404);
}

TEST_F(HttpServerTest, OtherMethodsAre405) {
  for (const char* method : {"POST", "PUT", "DELETE"}) {
    const std::optional<HttpResponse> response = Fetch(server_->port(), method, "/metrics");
    ASSERT_TRUE(response.has_value()) << method;
    EXPECT_EQ(response->status, 405) << method;
    EXPECT_EQ(response->header("allow"), "GET, HEAD") << method;
  }
  const std::optional<HttpResponse> health = Fetch(server_->port(), "POST", "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 405);
}

TEST_F(HttpServerTest, HeadHasLengthButNoBody) {
  TestConnection connection(server_->port());
  ASSERT_TRUE(connection.connected());
  ASSERT_TRUE(connection.Send("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::optional<HttpResponse> head = connection.ReadResponse(/*head=*/true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->header("content-type"), kTextContentType);
  EXPECT_EQ(head->header("content-length"), std::to_string(registry_.Serialize().size()));
  // Had a body followed, it would be read here as the next response's status line.
  ASSERT_TRUE(connection.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::optional<HttpResponse> next = connection.ReadResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(next->body, "ok\n");
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequests) {
  TestConnection connection(server_->port());
  ASSERT_TRUE(connection.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::optional<HttpResponse> response = connection.ReadResponse();
    ASSERT_TRUE(response.has_value()) << "request " << i;
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, registry_.Serialize());
  }
  // Pipelined: both requests in one write.
  ASSERT_TRUE(connection.Send(
      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::optional<HttpResponse> first = connection.ReadResponse();
  const std::optional<HttpResponse> second = connection.ReadResponse();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(second->status, 404);
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  TestConnection connection(server_->port());
  ASSERT_TRUE(connection.connected());
  ASSERT_TRUE(connection.Send("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"));
  ASSERT_TRUE(connection.ReadResponse().has_value());
  EXPECT_TRUE(connection.WaitForClose());
}

TEST_F(HttpServerTest, GarbageClosesTheConnectionButNotTheServer) {
  {
    TestConnection connection(server_->port());
    ASSERT_TRUE(connection.connected());
    ASSERT_TRUE(connection.Send(std::string("\x00\x01\x02 garbage \xff\r\n\r\n", 17)));
    const std::optional<HttpResponse> response = connection.ReadResponse();
    if (response.has_value()) {
      EXPECT_EQ(response->status, 400);
    }
    EXPECT_TRUE(connection.WaitForClose());
  }
  {
    TestConnection connection(server_->port());
    ASSERT_TRUE(connection.connected());
    ASSERT_TRUE(connection.Send("GET /metrics HTTP/9.9.9\r\n\r\n"));
    EXPECT_TRUE(connection.WaitForClose());
  }
  const std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/metrics");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, registry_.Serialize());
}

TEST_F(HttpServerTest, OversizedHeaderClosesTheConnection) {
  {
    TestConnection connection(server_->port());
    ASSERT_TRUE(connection.connected());
    const std::string request =
        "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(64 * 1024, 'a') + "\r\n\r\n";
    connection.Send(request);  // the server may close before it has read it all
    const std::optional<HttpResponse> response = connection.ReadResponse();
    if (response.has_value()) {
      EXPECT_EQ(response->status, 431);
    }
    EXPECT_TRUE(connection.WaitForClose());
  }
  const std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, HalfARequestThenHangupIsHarmless) {
  {
    TestConnection connection(server_->port());
    ASSERT_TRUE(connection.connected());
    ASSERT_TRUE(connection.Send("GET /metr"));
  }
  const std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, SecondServerOnTheSamePortIsUnavailable) {
  HttpServerOptions options = Loopback();
  options.port = server_->port();
  Registry other;
  const auto second = HttpServer::Start(options, other, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos)
      << second.status().message();
  // The first one is unaffected.
  const std::optional<HttpResponse> response = Fetch(server_->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST(HttpServerStartTest, HostNameIsResolved) {
  Registry registry;
  HttpServerOptions options;
  options.address = "localhost";
  options.port = 0;
  auto server = HttpServer::Start(options, registry, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // "localhost" may resolve to ::1 first, which the IPv4 client cannot reach; the bind
  // succeeding with a port is what is checked.
  EXPECT_NE((*server)->port(), 0);
}

TEST(HttpServerStartTest, BadAddressIsInvalidArgument) {
  Registry registry;
  HttpServerOptions options;
  options.address = "no-such-host.invalid";
  options.port = 0;
  const auto server = HttpServer::Start(options, registry, nullptr);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpServerStartTest, NoHealthFunctionMeansHealthy) {
  Registry registry;
  auto server = HttpServer::Start(Loopback(), registry, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::optional<HttpResponse> response = Fetch((*server)->port(), "GET", "/healthz");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpServerTest, StopClosesConnectionsAndIsIdempotent) {
  const uint16_t port = server_->port();
  TestConnection idle(port);
  ASSERT_TRUE(idle.connected());
  ASSERT_TRUE(idle.Send("GET /healthz HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(idle.ReadResponse().has_value());  // now a kept-alive session
  server_->Stop();
  EXPECT_TRUE(idle.WaitForClose());
  server_->Stop();
  TestConnection after(port);
  EXPECT_FALSE(after.connected() && after.Send("GET /healthz HTTP/1.1\r\n\r\n") &&
               after.ReadResponse().has_value());
  server_.reset();  // the destructor's Stop after two explicit ones
}

TEST_F(HttpServerTest, StopFromAnotherThreadWhileServing) {
  std::atomic<bool> done{false};
  std::thread client([&] {
    while (!done.load()) Fetch(server_->port(), "GET", "/metrics");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server_->Stop();
  done = true;
  client.join();
}

TEST(HttpServerOptionsTest, IdleConnectionsTimeOut) {
  Registry registry;
  HttpServerOptions options = Loopback();
  options.idle_timeout = std::chrono::milliseconds(200);
  auto server = HttpServer::Start(options, registry, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  TestConnection connection((*server)->port());
  ASSERT_TRUE(connection.connected());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(connection.WaitForClose(std::chrono::milliseconds(3000)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  // A slow request (started, never finished) is cut off the same way.
  TestConnection slow((*server)->port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.Send("GET /metrics HTTP/1.1\r\n"));
  EXPECT_TRUE(slow.WaitForClose(std::chrono::milliseconds(3000)));
}

TEST(HttpServerOptionsTest, ConnectionsBeyondTheCapAreClosed) {
  Registry registry;
  HttpServerOptions options = Loopback();
  options.max_connections = 2;
  auto server = HttpServer::Start(options, registry, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  auto open_session = [&](TestConnection& c) {
    return c.connected() && c.Send("GET /healthz HTTP/1.1\r\n\r\n") && c.ReadResponse().has_value();
  };
  TestConnection first(port), second(port);
  ASSERT_TRUE(open_session(first));
  ASSERT_TRUE(open_session(second));
  {
    TestConnection third(port);
    ASSERT_TRUE(third.connected());  // the kernel accepts; the server closes it at once
    EXPECT_TRUE(third.WaitForClose());
  }
  first.Close();
  // Once the server has seen the hangup, there is room again.
  bool served = false;
  for (int attempt = 0; attempt < 50 && !served; ++attempt) {
    TestConnection again(port);
    served = open_session(again);
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace stitch::metrics
