// Helpers shared between the client library's source files.
#pragma once

#include <string>

#include "stitch/compiler/status.h"

namespace stitch::client::internal {

// Returns the gRPC target for a stitchd address: a path starting with '/' names a unix
// socket; anything else ("unix:///path", "host:port") is passed through.
std::string NormalizeAddress(const std::string& address);

// Returns the canonical upper-case name of a grpc::StatusCode value, e.g. "UNAVAILABLE".
const char* GrpcCodeName(int code);

// Returns the stitch code for a grpc::StatusCode value: the same name where one exists,
// kUnavailable for codes that mean "not usable right now", kInternal otherwise.
StatusCode ToStatusCode(int code);

// An object whose locks must be held across fork() (see client.cc).
class ForkLockable {
 public:
  virtual void LockForFork() = 0;
  virtual void UnlockAfterFork() = 0;

 protected:
  ~ForkLockable() = default;
};

}  // namespace stitch::client::internal
