// The bounded pool compiles run on, so that no compile ever occupies a gRPC thread.
//
// Thread-safety: every method may be called from any thread. Tasks run on the pool's
// threads; a task must not block on another task.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <functional>

namespace stitch::daemon {

class CompilePool {
 public:
  // `workers` threads; at most `max_queue` tasks wait for a thread at any time.
  CompilePool(uint32_t workers, uint32_t max_queue);
  ~CompilePool();  // drains
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Queues `task` and returns true; returns false without queueing when `max_queue` tasks
  // already wait or the pool is draining.
  bool TrySubmit(std::function<void()> task);

  // Tasks queued and not yet started.
  uint32_t queued() const { return queued_.load(); }
  // Tasks running now.
  uint32_t running() const { return running_.load(); }

  // Stops accepting tasks and waits until every queued and running task has finished.
  // Idempotent.
  void Drain();

 private:
  boost::asio::thread_pool pool_;
  const uint32_t max_queue_;
  std::atomic<uint32_t> queued_{0};
  std::atomic<uint32_t> running_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace stitch::daemon
