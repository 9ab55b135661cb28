// Single-flight: concurrent requests for one key share one piece of work. The first caller
// of Join for a key becomes its leader and starts the work; everyone who joins before
// Finish receives the leader's result.
//
// Thread-safety: all methods may be called from any thread. Callbacks run on the thread
// that calls Finish, outside the lock, in the order they joined.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stitch::daemon {

template <typename Result>
class SingleFlight {
 public:
  using Callback = std::function<void(const Result&)>;

  // Adds `done` to the waiters for `key`. Returns true when the caller is the leader and
  // must eventually call Finish(key, ...).
  bool Join(const std::string& key, Callback done) {
    std::lock_guard lock(mu_);
    auto [it, inserted] = waiters_.try_emplace(key);
    it->second.push_back(std::move(done));
    return inserted;
  }

  // Delivers `result` to every waiter of `key` and forgets the key, so the next Join leads.
  void Finish(const std::string& key, const Result& result) {
    std::vector<Callback> waiters;
    {
      std::lock_guard lock(mu_);
      auto it = waiters_.find(key);
      if (it == waiters_.end()) return;
      waiters = std::move(it->second);
      waiters_.erase(it);
    }
    for (Callback& done : waiters) done(result);
  }

  // Returns the number of keys with work in flight.
  size_t in_flight() const {
    std::lock_guard lock(mu_);
    return waiters_.size();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<Callback>> waiters_;
};

}  // namespace stitch::daemon
