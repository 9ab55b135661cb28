// Repeats a check on one background thread, with doubling intervals, until it reports that
// it is done: how the daemon waits for an entry that another node of the cluster is
// compiling, without holding a compile thread or a gRPC thread while it waits.
//
// Thread-safety: Add and pending may be called from any thread. Checks run on the poller's
// thread, one at a time; a check may call Add.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stitch::daemon {

class Poller {
 public:
  // Checks first run `first` after they are added; each later interval doubles, up to `most`.
  Poller(std::chrono::milliseconds first, std::chrono::milliseconds most);
  // Stops: checks still pending are cancelled.
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Runs `check` until it returns true. If the poller stops first, `cancel` runs instead (on
  // the stopping thread), so that whoever waits on the check always hears back.
  void Add(std::function<bool()> check, std::function<void()> cancel);
  // As Add, with this check's own intervals: first after `first`, doubling up to `most`.
  void Add(std::function<bool()> check, std::function<void()> cancel,
           std::chrono::milliseconds first, std::chrono::milliseconds most);

  // Checks added and not yet done.
  size_t pending() const;

  // Cancels every pending check and joins the thread. Idempotent; Add after Stop cancels at
  // once.
  void Stop();

 private:
  struct Item {
    std::function<bool()> check;
    std::function<void()> cancel;
    std::chrono::steady_clock::time_point due;
    std::chrono::milliseconds interval;
    std::chrono::milliseconds most;
  };
  void Run();

  const std::chrono::milliseconds first_;
  const std::chrono::milliseconds most_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Item> items_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace stitch::daemon
