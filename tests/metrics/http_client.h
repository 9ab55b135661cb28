// A blocking HTTP/1.1 client on a raw socket, just enough for the metrics endpoint's tests:
// it writes bytes as given (so tests can send malformed requests) and reads responses
// framed by Content-Length.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace stitch::metrics::test_http {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  // The value of header `name` (lower case), or "" when absent.
  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class TestConnection {
 public:
  // Connects to 127.0.0.1:port; connected() tells whether it worked.
  explicit TestConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~TestConnection() { Close(); }
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  bool connected() const { return fd_ >= 0; }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads one response; nullopt if the server closed the connection (or `timeout` passed)
  // before a whole one arrived. With `head`, a Content-Length is not followed by a body.
  std::optional<HttpResponse> ReadResponse(bool head = false,
                                           std::chrono::milliseconds timeout = kTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t header_end;
    while ((header_end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return std::nullopt;
    }
    HttpResponse response;
    const std::string head_text = pending_.substr(0, header_end);
    pending_.erase(0, header_end + 4);
    size_t line_end = head_text.find("\r\n");
    const std::string status_line = head_text.substr(0, line_end);
    // "HTTP/1.1 200 OK"
    if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0) return std::nullopt;
    response.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head_text.find("\r\n", start);
      const std::string line = head_text.substr(start, line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t value_start = colon + 1;
      while (value_start < line.size() && line[value_start] == ' ') ++value_start;
      response.headers[name] = line.substr(value_start);
    }
    size_t length = 0;
    if (auto it = response.headers.find("content-length"); it != response.headers.end()) {
      length = std::stoul(it->second);
    }
    if (head) length = 0;
    while (pending_.size() < length) {
      if (!Fill(deadline)) return std::nullopt;
    }
    response.body = pending_.substr(0, length);
    pending_.erase(0, length);
    return response;
  }

  // True when the server closes the connection (EOF or reset) within `timeout`; bytes
  // that arrive first are dropped.
  bool WaitForClose(std::chrono::milliseconds timeout = kTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Fill(deadline)) {
    }
    pending_.clear();
    return eof_;
  }

  static constexpr std::chrono::milliseconds kTimeout{5000};

 private:
  // Reads what is available before `deadline`; false on EOF, error or timeout.
  bool Fill(std::chrono::steady_clock::time_point deadline) {
    if (fd_ < 0) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    pending_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool eof_ = false;
  std::string pending_;
};

// Sends one request on a fresh connection and reads its response.
inline std::optional<HttpResponse> Fetch(uint16_t port, const std::string& method,
                                         const std::string& target) {
  TestConnection connection(port);
  if (!connection.connected()) return std::nullopt;
  if (!connection.Send(method + " " + target +
                       " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")) {
    return std::nullopt;
  }
  return connection.ReadResponse(method == "HEAD");
}

}  // namespace stitch::metrics::test_http
