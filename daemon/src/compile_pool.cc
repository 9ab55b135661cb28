#include "compile_pool.h"

#include <boost/asio/post.hpp>

namespace stitch::daemon {

CompilePool::CompilePool(uint32_t workers, uint32_t max_queue)
    : pool_(workers == 0 ? 1 : workers), max_queue_(max_queue) {}

CompilePool::~CompilePool() { Drain(); }

bool CompilePool::TrySubmit(std::function<void()> task) {
  if (draining_.load()) return false;
  // Reserve a queue slot first so concurrent submitters cannot overshoot the bound.
  if (queued_.fetch_add(1) >= max_queue_) {
    queued_.fetch_sub(1);
    return false;
  }
  boost::asio::post(pool_, [this, task = std::move(task)] {
    queued_.fetch_sub(1);
    running_.fetch_add(1);
    task();
    running_.fetch_sub(1);
  });
  return true;
}

void CompilePool::Drain() {
  draining_.store(true);
  pool_.join();
}

}  // namespace stitch::daemon
