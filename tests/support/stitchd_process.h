// A real stitchd process for integration tests: started from the build tree on a
// temporary socket and data dir, with its TCP and metrics ports picked by the kernel
// (port 0) and read back from the runtime file the daemon writes once it serves.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/command.h"

namespace stitch::testing {

inline std::string StitchdBinary() { return std::string(STITCH_BINARY_DIR) + "/daemon/stitchd"; }

struct DaemonPaths {
  std::string data_dir;
  std::string socket;
  std::string log;
};

// A directory under /tmp (socket paths must stay under 108 bytes), removed at destruction.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/stitchd-test-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

  // Returns the files of a daemon called `name` inside this directory: data dir <name>/,
  // socket <name>.sock, log <name>.log. Different names never share a file.
  DaemonPaths Daemon(const std::string& name = "stitchd") const {
    return {path_ + "/" + name, path_ + "/" + name + ".sock", path_ + "/" + name + ".log"};
  }

 private:
  std::string path_;
};

// Runs stitchd with `args` (after the binary name), stderr into `log`. Returns the pid.
inline pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    std::string binary = StitchdBinary();
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class StitchdProcess {
 public:
  // Starts a daemon on `paths` with extra flags; Started() tells whether it came up.
  StitchdProcess(DaemonPaths paths, std::vector<std::string> extra = {})
      : paths_(std::move(paths)) {
    std::vector<std::string> args = {"--data-dir",       paths_.data_dir,
                                     "--socket",         paths_.socket,
                                     "--grpc-listen",    "127.0.0.1:0",
                                     "--metrics-listen", "127.0.0.1:0",
                                     "--workers",        "2",
                                     "--log-format",     "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = Spawn(args, paths_.log);
    WaitUntilServing();
  }
  ~StitchdProcess() { Stop(); }

  bool started() const { return started_; }
  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string address() const { return "unix://" + paths_.socket; }
  bool alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0 && !exited_; }

  // Sends SIGTERM and returns the exit status (-1 when it had to be killed).
  int Stop(std::chrono::seconds grace = std::chrono::seconds(60)) {
    if (pid_ <= 0 || exited_) return exit_code_;
    ::kill(pid_, SIGTERM);
    return Wait(grace);
  }

  // Waits for the process to exit by itself; returns its exit code, -1 on timeout (then
  // kills it) or on death by signal.
  int Wait(std::chrono::seconds timeout) {
    if (exited_) return exit_code_;
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    exited_ = true;
    exit_code_ = -1;
    return exit_code_;
  }

  std::string log() const { return ReadFile(paths_.log); }

 private:
  void WaitUntilServing() {
    std::string info = paths_.data_dir + "/stitchd.json";
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return;
      }
      if (std::filesystem::exists(info)) {
        nlohmann::json j = nlohmann::json::parse(ReadFile(info), nullptr, false);
        if (!j.is_discarded() && j.value("pid", 0) == pid_) {
          grpc_port_ = j.value("grpc_port", 0);
          metrics_port_ = j.value("metrics_port", 0);
          started_ = true;
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  DaemonPaths paths_;
  pid_t pid_ = -1;
  bool started_ = false;
  bool exited_ = false;
  int exit_code_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

// Returns the value `d`'s /metrics page gives the series `series` (name and labels, as
// printed), or 0 when it is absent.
inline double ScrapeMetric(const StitchdProcess& d, const std::string& series) {
  int status = 0;
  const std::string body = RunCommand(
      "curl -sS http://127.0.0.1:" + std::to_string(d.metrics_port()) + "/metrics", &status);
  size_t at = 0;
  while ((at = body.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || body[at - 1] == '\n') return std::stod(body.substr(at + series.size() + 1));
    at += series.size();
  }
  return 0;
}

}  // namespace stitch::testing
