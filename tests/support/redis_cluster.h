// A real Redis Cluster for tests: 3 masters and 3 replicas of Debian's redis-server on
// loopback ports the kernel had free, joined with `redis-cli --cluster create`, with a short
// cluster-node-timeout so that a failover fits in a test.
//
// The default user has the admin password (the tests' FLUSHALL, DEBUG SLEEP and resharding
// use it); the ACL user "stitchd" has only the commands the cluster tier sends, as the
// README advises operators to configure.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/command.h"
#include "support/stitchd_process.h"

namespace stitch::testing {

inline constexpr const char* kRedisAdminPassword = "admin-pw";
inline constexpr const char* kRedisUser = "stitchd";
inline constexpr const char* kRedisUserPassword = "stitchd-pw";
// What the cluster tier needs, nothing else (see the README's cluster section).
inline constexpr const char* kRedisUserAcl =
    "on >stitchd-pw ~stitch:* resetchannels -@all +get +set +pexpire +del +ping +auth +asking "
    "+cluster|slots";

inline bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Returns a port the kernel had free whose cluster-bus port (port + 10000) is free too.
inline int PickRedisPort(const std::vector<int>& taken) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    const int port = ntohs(addr.sin_port);
    if (port == 0 || port + 10000 > 65535) continue;
    bool clash = false;
    for (int t : taken) clash = clash || t == port || t + 10000 == port || t == port + 10000;
    if (!clash && PortFree(port + 10000)) return port;
  }
  return 0;
}

class RedisCluster {
 public:
  static constexpr int kNodes = 6;

  RedisCluster() {
    for (int i = 0; i < kNodes; ++i) ports_.push_back(PickRedisPort(ports_));
    pids_.assign(kNodes, -1);
    for (int i = 0; i < kNodes; ++i) StartNode(i);
    for (int i = 0; i < kNodes; ++i) {
      if (!WaitForPing(i, std::chrono::seconds(10))) return;
    }
    std::string create = "timeout 60 redis-cli --no-auth-warning -a " +
                         std::string(kRedisAdminPassword) + " --cluster create";
    for (int p : ports_) create += " 127.0.0.1:" + std::to_string(p);
    create += " --cluster-replicas 1 --cluster-yes > " + dir_.path() + "/create.log 2>&1";
    int status = -1;
    RunCommand(create, &status);
    if (status != 0) return;
    ready_ = WaitHealthy(std::chrono::seconds(30));
  }
  ~RedisCluster() {
    for (int i = 0; i < kNodes; ++i) Kill(i);
  }
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // True once every slot is served and every replica is in sync.
  bool ready() const { return ready_; }
  int port(int i) const { return ports_[static_cast<size_t>(i)]; }
  // "127.0.0.1:P,127.0.0.1:Q,..." for --cluster-nodes.
  std::string Seeds() const {
    std::string out;
    for (int p : ports_) out += (out.empty() ? "" : ",") + ("127.0.0.1:" + std::to_string(p));
    return out;
  }
  const std::string& dir() const { return dir_.path(); }

  // Runs redis-cli as the admin against node `i`; returns its stdout. A paused node fails
  // the call after 10 s rather than hanging the test.
  std::string Cli(int i, const std::string& args, int* status = nullptr) const {
    int s = -1;
    std::string out =
        RunCommand("timeout 10 redis-cli --no-auth-warning -a " + std::string(kRedisAdminPassword) +
                       " -p " + std::to_string(port(i)) + " " + args + " 2>&1",
                   &s);
    if (status != nullptr) *status = s;
    return out;
  }

  // Returns the indices of the nodes that are masters now (asked of each live node).
  std::vector<int> Masters() const {
    std::vector<int> out;
    for (int i = 0; i < kNodes; ++i) {
      if (pids_[static_cast<size_t>(i)] > 0 && Cli(i, "ROLE").rfind("master", 0) == 0) {
        out.push_back(i);
      }
    }
    return out;
  }

  // Returns the node serving `slot` as a master (by a live node's CLUSTER NODES), or -1.
  int MasterOfSlot(int slot) const {
    for (int asked = 0; asked < kNodes; ++asked) {
      if (pids_[static_cast<size_t>(asked)] <= 0) continue;
      std::istringstream lines(Cli(asked, "CLUSTER NODES"));
      for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string id, address, flags, master, ping, pong, epoch, link, range;
        words >> id >> address >> flags >> master >> ping >> pong >> epoch >> link;
        if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos) {
          continue;
        }
        while (words >> range) {
          if (range.front() == '[') continue;  // a migration marker, not ownership
          const size_t dash = range.find('-');
          const int first = std::stoi(range.substr(0, dash));
          const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
          if (slot < first || slot > last) continue;
          const int port = std::stoi(address.substr(address.rfind(':') + 1));
          for (int i = 0; i < kNodes; ++i) {
            if (ports_[static_cast<size_t>(i)] == port) return i;
          }
        }
      }
      return -1;
    }
    return -1;
  }

  void Kill(int i) {
    pid_t& pid = pids_[static_cast<size_t>(i)];
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  void Pause(int i) { ::kill(pids_[static_cast<size_t>(i)], SIGSTOP); }
  void Resume(int i) { ::kill(pids_[static_cast<size_t>(i)], SIGCONT); }
  // Starts a stopped node again on its port and its saved cluster config.
  void Restart(int i) {
    Kill(i);
    StartNode(i);
    WaitForPing(i, std::chrono::seconds(10));
  }

  // Waits until every live node reports cluster_state:ok, all 16384 slots are served and
  // each master has a live replica in sync (when `with_replicas`).
  bool WaitHealthy(std::chrono::seconds timeout, bool with_replicas = true) const {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (Healthy(with_replicas)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  void StartNode(int i) {
    const std::string p = std::to_string(port(i));
    const std::string node_dir = dir_.path() + "/" + p;
    std::filesystem::create_directories(node_dir);
    pid_t pid = ::fork();
    if (pid == 0) {
      const std::string log = node_dir + "/redis.log";
      std::vector<std::string> args = {"redis-server",
                                       "--port",
                                       p,
                                       "--bind",
                                       "127.0.0.1",
                                       "--dir",
                                       node_dir,
                                       "--cluster-enabled",
                                       "yes",
                                       "--cluster-config-file",
                                       node_dir + "/nodes.conf",
                                       "--cluster-node-timeout",
                                       "1000",
                                       "--cluster-replica-validity-factor",
                                       "0",
                                       "--save",
                                       "",
                                       "--appendonly",
                                       "no",
                                       "--logfile",
                                       log,
                                       "--requirepass",
                                       kRedisAdminPassword,
                                       "--masterauth",
                                       kRedisAdminPassword,
                                       "--enable-debug-command",
                                       "yes",
                                       "--user",
                                       kRedisUser};
      // The ACL rules follow the user name as separate words, as in redis.conf.
      std::istringstream rules(kRedisUserAcl);
      for (std::string rule; rules >> rule;) args.push_back(rule);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    pids_[static_cast<size_t>(i)] = pid;
  }

  bool WaitForPing(int i, std::chrono::seconds timeout) const {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (Cli(i, "PING").rfind("PONG", 0) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  bool Healthy(bool with_replicas) const {
    int masters = 0, synced_replicas = 0;
    for (int i = 0; i < kNodes; ++i) {
      if (pids_[static_cast<size_t>(i)] <= 0) continue;
      const std::string info = Cli(i, "CLUSTER INFO");
      if (info.find("cluster_state:ok") == std::string::npos ||
          info.find("cluster_slots_ok:16384") == std::string::npos) {
        return false;
      }
      const std::string role = Cli(i, "ROLE");
      if (role.rfind("master", 0) == 0) {
        ++masters;
      } else if (role.find("connected") != std::string::npos) {
        ++synced_replicas;
      }
    }
    return masters >= 3 && (!with_replicas || synced_replicas >= 3);
  }

  TempDir dir_;
  std::vector<int> ports_;
  std::vector<pid_t> pids_;
  bool ready_ = false;
};

}  // namespace stitch::testing
