// Error values that cross module boundaries.
//
// Thread-safety: Status and StatusOr are plain values; distinct objects may be used from
// different threads, a shared one only for reading.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace stitch {

// The kinds of failure a caller may want to branch on. Names follow gRPC's codes so the
// daemon can map them one to one.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the input (graph, HLO text, file, flag) is malformed
  kUnimplemented,       // well-formed, but outside what stitchd compiles (e.g. `dot`)
  kResourceExhausted,   // over a configured limit (nodes, elements, memory)
  kNotFound,            // a named thing (file, node, kernel) does not exist
  kInternal,            // a bug in stitchd, or a failure of LLVM / the CUDA toolkit
  kUnavailable,         // an optional component (ptxas, nvJitLink, libdevice) is absent,
                        // or a service is unreachable
  kFailedPrecondition,  // the system is not in a state to do this (e.g. a lock is held)
  kDeadlineExceeded,    // the caller's deadline passed first
  kDataLoss,            // stored bytes are corrupt (bad digest, truncated entry)
};

// Returns the canonical upper-case name of `code`, e.g. "INVALID_ARGUMENT".
const char* StatusCodeName(StatusCode code);

// Success, or a code with a message that names what is wrong.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns "CODE: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed by `context` (e.g. the file name).
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }

// A value of type T, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "StatusOr built from an OK status carries no value");
    if (status_.ok()) status_ = Internal("StatusOr constructed from OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace stitch

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define STITCH_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::stitch::Status stitch_status_ = (expr);        \
    if (!stitch_status_.ok()) return stitch_status_; \
  } while (0)

#define STITCH_CONCAT_INNER(a, b) a##b
#define STITCH_CONCAT(a, b) STITCH_CONCAT_INNER(a, b)

// Declares `lhs` from a StatusOr expression, returning its Status on failure.
#define STITCH_ASSIGN_OR_RETURN(lhs, expr) \
  STITCH_ASSIGN_OR_RETURN_IMPL(STITCH_CONCAT(stitch_or_, __LINE__), lhs, expr)
#define STITCH_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
