#include "poller.h"

#include <algorithm>

namespace stitch::daemon {

Poller::Poller(std::chrono::milliseconds first, std::chrono::milliseconds most)
    : first_(first), most_(std::max(first, most)), thread_([this] { Run(); }) {}

Poller::~Poller() { Stop(); }

void Poller::Add(std::function<bool()> check, std::function<void()> cancel) {
  Add(std::move(check), std::move(cancel), first_, most_);
}

void Poller::Add(std::function<bool()> check, std::function<void()> cancel,
                 std::chrono::milliseconds first, std::chrono::milliseconds most) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      items_.push_back(Item{std::move(check), std::move(cancel),
                            std::chrono::steady_clock::now() + first, first,
                            std::max(first, most)});
      changed_.notify_one();
      return;
    }
  }
  cancel();
}

size_t Poller::pending() const {
  std::lock_guard lock(mu_);
  return items_.size();
}

void Poller::Stop() {
  std::vector<Item> cancelled;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    changed_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(mu_);
    cancelled.swap(items_);
  }
  for (Item& item : cancelled) item.cancel();
}

void Poller::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (items_.empty()) {
      changed_.wait(lock);
      continue;
    }
    auto next = std::min_element(items_.begin(), items_.end(),
                                 [](const Item& a, const Item& b) { return a.due < b.due; });
    if (std::chrono::steady_clock::now() < next->due) {
      // A copy: the wait re-reads its deadline after waking, and an Add meanwhile may have
      // moved the items.
      const auto due = next->due;
      changed_.wait_until(lock, due);
      continue;
    }
    Item item = std::move(*next);
    items_.erase(next);
    // The check talks to the network; others may Add meanwhile.
    lock.unlock();
    const bool done = item.check();
    lock.lock();
    if (done) continue;
    item.interval = std::min(item.interval * 2, item.most);
    item.due = std::chrono::steady_clock::now() + item.interval;
    items_.push_back(std::move(item));
  }
}

}  // namespace stitch::daemon
