// Clients of the test daemons in tests/integration: one definition of how patient they are.
#pragma once

#include <chrono>
#include <string>

#include "stitch/client/client.h"
#include "support/stitchd_process.h"

namespace stitch::testing {

// Returns options for a client of `daemon` over its Unix socket, with no in-process cache
// (every call reaches the daemon) and deadlines generous enough for a loaded 2-core CI
// machine or a sanitizer build: only a wrong answer, never a slow one, fails a test.
inline client::ClientOptions PatientClientOptions(const StitchdProcess& daemon) {
  client::ClientOptions o;
  o.address = daemon.address();
  o.local_cache_entries = 0;
  o.lookup_deadline = std::chrono::milliseconds(10000);
  o.compile_deadline = std::chrono::milliseconds(120000);
  o.admin_deadline = std::chrono::milliseconds(10000);
  return o;
}

}  // namespace stitch::testing
