// Running the project's binaries as a user would: a shell command, its output and its exit
// status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace stitch::testing {

// Runs a shell command and returns its stdout; `status` receives the exit status (-1 when
// it could not start or did not exit normally).
inline std::string RunCommand(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int rc = ::pclose(pipe);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs the built stitchctl with `args` (shell words) and returns what it printed.
inline Outcome RunStitchctl(const std::string& args) {
  Outcome o;
  o.out = RunCommand(std::string(STITCH_BINARY_DIR) + "/client/stitchctl " + args + " 2>&1",
                     &o.exit_code);
  return o;
}

}  // namespace stitch::testing
