// Running a CUDA toolkit program (ptxas, nvdisasm) on one file: a private temporary folder
// for its input and output, the program spawned with its output captured, and its exit
// status turned into a Status.
//
// Thread-safety: each call has its own folder; calls may run concurrently.
#pragma once

#include <string>
#include <vector>

#include "stitch/base/status.h"

namespace stitch::codegen {

// True when `path` names an executable file.
bool IsExecutable(const std::string& path);

// A private temporary folder, removed with its files on destruction; path() is empty when it
// could not be made.
class ToolDir {
 public:
  ToolDir();
  ~ToolDir();
  ToolDir(const ToolDir&) = delete;
  ToolDir& operator=(const ToolDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `contents` to the file `name` in the folder; returns its path.
  StatusOr<std::string> Write(const std::string& name, const std::string& contents);

 private:
  std::string path_;
};

// What a program wrote, and whether it exited with status 0.
struct ToolRun {
  bool ok = false;
  std::string output;  // stdout and stderr, in the order written
};

// Runs `argv` (argv[0] the program's path) with stdout and stderr captured into a file of
// `dir`. UNAVAILABLE when the program cannot be started; otherwise what it wrote, and
// whether it exited with status 0.
StatusOr<ToolRun> RunTool(const std::vector<std::string>& argv, const ToolDir& dir);

// The whole file at `path`, or "" when it cannot be read.
std::string ReadFileBytes(const std::string& path);

}  // namespace stitch::codegen
