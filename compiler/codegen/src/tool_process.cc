#include "tool_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace stitch::codegen {

bool IsExecutable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ToolDir::ToolDir() {
  std::string templ = std::string(P_tmpdir) + "/stitch-tool-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data())) path_ = buf.data();
}

ToolDir::~ToolDir() {
  if (path_.empty()) return;
  if (DIR* d = opendir(path_.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((path_ + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(path_.c_str());
}

StatusOr<std::string> ToolDir::Write(const std::string& name, const std::string& contents) {
  if (path_.empty()) return Internal(std::string("mkdtemp failed: ") + std::strerror(errno));
  const std::string path = path_ + "/" + name;
  std::ofstream f(path, std::ios::binary);
  f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!f) return Internal("cannot write " + path);
  return path;
}

StatusOr<ToolRun> RunTool(const std::vector<std::string>& argv, const ToolDir& dir) {
  if (dir.path().empty()) return Internal(std::string("mkdtemp failed: ") + std::strerror(errno));
  const std::string out = dir.path() + "/tool-output.txt";
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Unavailable("cannot run '" + argv[0] + "': " + std::strerror(rc));
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return Internal(std::string("waitpid failed: ") + std::strerror(errno));
  }
  ToolRun run;
  run.ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  run.output = ReadFileBytes(out);
  return run;
}

}  // namespace stitch::codegen
