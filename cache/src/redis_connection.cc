#include "redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>

namespace stitch::cache::redis {
namespace {

// The time left before `deadline`, at least a millisecond so that a socket timeout of zero
// (which means "forever" to the kernel) can never be set.
timeval TimeLeft(Deadline deadline, std::chrono::milliseconds cap = std::chrono::hours(1)) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(
      deadline - std::chrono::steady_clock::now());
  left = std::clamp<std::chrono::microseconds>(left, std::chrono::milliseconds(1), cap);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(left.count() / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(left.count() % 1000000);
  return tv;
}

Reply Convert(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::kString;
      out.text.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kStatus;
      out.text.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.text.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      out.elements.reserve(r.elements);
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(Convert(*r.element[i]));
      break;
    default:
      out.type = Reply::Type::kNil;
      break;
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Connection>> Connection::Open(const NodeAddress& node,
                                                       const ClusterOptions& options,
                                                       Deadline deadline) {
  if (std::chrono::steady_clock::now() >= deadline) {
    return DeadlineExceeded("no time left to connect to " + node.ToString());
  }
  const timeval tv = TimeLeft(deadline, options.connect_timeout);
  redisContext* context = redisConnectWithTimeout(node.host.c_str(), node.port, tv);
  if (context == nullptr) return Unavailable("cannot allocate a connection to " + node.ToString());
  if (context->err != 0) {
    std::string why = context->errstr;
    redisFree(context);
    return Unavailable("cannot connect to cluster node " + node.ToString() + ": " + why);
  }
  std::unique_ptr<Connection> connection(new Connection(node, context));
  if (options.password.empty()) return connection;
  Command auth = {"AUTH"};
  if (!options.user.empty()) auth.push_back(options.user);
  auth.push_back(options.password);
  StatusOr<std::vector<Reply>> replies = connection->Exchange({auth}, deadline);
  if (!replies.ok()) return replies.status();
  const Reply& reply = replies->front();
  if (reply.is_error()) {
    return FailedPrecondition("cluster node " + node.ToString() + " refused AUTH as user \"" +
                              (options.user.empty() ? "default" : options.user) +
                              "\": " + reply.text);
  }
  return connection;
}

Connection::~Connection() { redisFree(context_); }

Status Connection::SocketError(const char* what) {
  broken_ = true;
  const bool timed_out = context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
  const std::string message = std::string(what) + " cluster node " + node_.ToString() + ": " +
                              (timed_out ? "timed out" : context_->errstr);
  return timed_out ? DeadlineExceeded(message) : Unavailable(message);
}

StatusOr<std::vector<Reply>> Connection::Exchange(const std::vector<Command>& commands,
                                                  Deadline deadline) {
  if (broken_) return Unavailable("the connection to " + node_.ToString() + " is broken");
  const timeval tv = TimeLeft(deadline);
  if (redisSetTimeout(context_, tv) != REDIS_OK) return SocketError("cannot set a timeout on");
  for (const Command& command : commands) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    argv.reserve(command.size());
    lengths.reserve(command.size());
    for (const std::string& arg : command) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                               lengths.data()) != REDIS_OK) {
      return SocketError("cannot queue a command for");
    }
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      return SocketError("lost the reply from");
    }
    auto* reply = static_cast<redisReply*>(raw);
    replies.push_back(Convert(*reply));
    freeReplyObject(reply);
  }
  return replies;
}

}  // namespace stitch::cache::redis
