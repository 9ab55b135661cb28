// A circuit breaker for calls to a remote tier: after `failures` failures in a row it opens
// and refuses calls for `open_for`; then it lets one call through (half-open), and that
// call's outcome closes it or opens it again.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "stitch/cache/cluster_store.h"

namespace stitch::cache {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;

  CircuitBreaker(uint32_t failures, std::chrono::milliseconds open_for)
      : failures_to_open_(failures), open_for_(open_for) {}

  // Returns true when the call may go ahead. While half-open only one call at a time may.
  bool Allow() {
    std::lock_guard lock(mu_);
    if (state_ == BreakerState::kClosed) return true;
    if (state_ == BreakerState::kOpen && Clock::now() >= reopen_at_) {
      state_ = BreakerState::kHalfOpen;
      probing_ = false;
    }
    if (state_ == BreakerState::kHalfOpen && !probing_) {
      probing_ = true;
      return true;
    }
    return false;
  }

  // Records the outcome of a call that Allow admitted.
  void Record(bool success) {
    std::lock_guard lock(mu_);
    if (success) {
      consecutive_failures_ = 0;
      state_ = BreakerState::kClosed;
      probing_ = false;
      return;
    }
    ++consecutive_failures_;
    if (state_ == BreakerState::kHalfOpen ||
        (state_ == BreakerState::kClosed && consecutive_failures_ >= failures_to_open_)) {
      state_ = BreakerState::kOpen;
      reopen_at_ = Clock::now() + open_for_;
      probing_ = false;
      ++trips_;
    }
  }

  BreakerState state() const {
    std::lock_guard lock(mu_);
    return state_;
  }
  uint64_t trips() const {
    std::lock_guard lock(mu_);
    return trips_;
  }

 private:
  const uint32_t failures_to_open_;
  const std::chrono::milliseconds open_for_;
  mutable std::mutex mu_;
  BreakerState state_ = BreakerState::kClosed;
  uint32_t consecutive_failures_ = 0;
  bool probing_ = false;
  Clock::time_point reopen_at_{};
  uint64_t trips_ = 0;
};

}  // namespace stitch::cache
