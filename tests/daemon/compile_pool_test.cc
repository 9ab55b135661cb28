// The compile pool's queue bound and drain, single-flight's one-leader rule, and the key
// memo, under real threads.
#include "../../daemon/src/compile_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "../../daemon/src/key_memo.h"
#include "../../daemon/src/single_flight.h"

namespace stitch::daemon {
namespace {

// A gate the test opens, so tasks stay queued or running as long as it needs.
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(CompilePoolTest, RefusesPastTheQueueBoundAndRunsEverythingItAccepted) {
  CompilePool pool(/*workers=*/1, /*max_queue=*/2);
  Gate gate;
  std::atomic<int> ran{0};
  std::latch started(1);
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.count_down();
    gate.Wait();
    ran.fetch_add(1);
  }));
  started.wait();  // the worker is busy; what follows waits in the queue
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  EXPECT_EQ(pool.queued(), 2u);
  EXPECT_EQ(pool.running(), 1u);
  EXPECT_FALSE(pool.TrySubmit([&] { ran.fetch_add(100); }));
  gate.Open();
  pool.Drain();
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(pool.queued(), 0u);
  EXPECT_FALSE(pool.TrySubmit([] {})) << "a drained pool takes no work";
}

TEST(CompilePoolTest, ConcurrentSubmittersNeverOvershootTheBound) {
  CompilePool pool(1, 8);
  Gate gate;
  std::latch started(1);
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.count_down();
    gate.Wait();
  }));
  started.wait();
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) accepted.fetch_add(pool.TrySubmit([] {}) ? 1 : 0);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 8);
  gate.Open();
  pool.Drain();
}

TEST(SingleFlightTest, OneLeaderPerKeyAndEveryWaiterGetsTheResult) {
  SingleFlight<int> flights;
  constexpr int kWaiters = 32;
  std::atomic<int> leaders{0}, delivered{0}, sum{0};
  std::latch start(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      bool leader = flights.Join("k", [&](const int& v) {
        delivered.fetch_add(1);
        sum.fetch_add(v);
      });
      leaders.fetch_add(leader ? 1 : 0);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(leaders.load(), 1);
  EXPECT_EQ(flights.in_flight(), 1u);
  flights.Finish("k", 7);
  EXPECT_EQ(delivered.load(), kWaiters);
  EXPECT_EQ(sum.load(), 7 * kWaiters);
  EXPECT_EQ(flights.in_flight(), 0u);
  // The key is forgotten: the next caller leads a new flight.
  EXPECT_TRUE(flights.Join("k", [](const int&) {}));
  EXPECT_TRUE(flights.Join("other", [](const int&) {}));
}

TEST(KeyMemoTest, RemembersByExactBytesAndStartsAfreshWhenFull) {
  KeyMemo memo(2);
  std::string a = KeyMemo::Digest("request a"), b = KeyMemo::Digest("request b");
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(KeyMemo::Digest("request a"), a);
  EXPECT_FALSE(memo.Find(a).has_value());
  memo.Remember(a, "key-a");
  memo.Remember(b, "key-b");
  EXPECT_EQ(memo.Find(a).value_or(""), "key-a");
  EXPECT_EQ(memo.Find(b).value_or(""), "key-b");
  memo.Remember(KeyMemo::Digest("request c"), "key-c");
  EXPECT_FALSE(memo.Find(a).has_value());
  EXPECT_EQ(memo.Find(KeyMemo::Digest("request c")).value_or(""), "key-c");
}

}  // namespace
}  // namespace stitch::daemon
