// Helpers shared between the client library's source files.
#pragma once

#include <string>

#include "stitch/base/status.h"

namespace stitch::client::internal {

// Returns the gRPC target for a stitchd address: a path starting with '/' names a unix
// socket; anything else ("unix:///path", "host:port") is passed through.
std::string NormalizeAddress(const std::string& address);

// An object whose locks must be held across fork() (see client.cc).
class ForkLockable {
 public:
  virtual void LockForFork() = 0;
  virtual void UnlockAfterFork() = 0;

 protected:
  ~ForkLockable() = default;
};

}  // namespace stitch::client::internal
