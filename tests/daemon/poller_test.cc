// The poller's schedule and stop, under real threads: checks added while it waits for an
// earlier one all run, retried ones back off, and stopping cancels what is left.
#include "../../daemon/src/poller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace stitch::daemon {
namespace {

using std::chrono::milliseconds;

// Waits up to 30 s for `poller` to have nothing pending.
bool Drained(const Poller& poller) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < end) {
    if (poller.pending() == 0) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

// The poller waits for its earliest check while Adds grow (and reallocate) the list under
// it. A wait that kept a reference into the list read freed memory here (ASan's
// heap-use-after-free in the cluster tests).
TEST(PollerTest, ChecksAddedWhileItWaitsAllRunOnce) {
  Poller poller(milliseconds(1), milliseconds(8));
  constexpr int kChecks = 200;
  std::vector<std::atomic<int>> runs(kChecks);
  std::atomic<int> cancels{0};
  poller.Add([&] { return ++runs[0], true; }, [&] { ++cancels; }, milliseconds(300),
             milliseconds(300));
  for (int i = 1; i < kChecks; ++i) {
    // A pause, so that the poller is waiting when the list grows.
    std::this_thread::sleep_for(milliseconds(1));
    poller.Add([&, i] { return ++runs[static_cast<size_t>(i)], true; }, [&] { ++cancels; },
               milliseconds(200 + i), milliseconds(400));
  }
  ASSERT_TRUE(Drained(poller));
  for (int i = 0; i < kChecks; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << i;
  EXPECT_EQ(cancels.load(), 0);
}

TEST(PollerTest, AnUnfinishedCheckIsRetriedUntilDone) {
  Poller poller(milliseconds(1), milliseconds(4));
  std::atomic<int> runs{0};
  poller.Add([&] { return ++runs >= 5; }, [] {});
  ASSERT_TRUE(Drained(poller));
  EXPECT_EQ(runs.load(), 5);
}

TEST(PollerTest, StopCancelsPendingChecksAndLaterAdds) {
  Poller poller(milliseconds(1), milliseconds(4));
  std::atomic<int> runs{0};
  std::atomic<int> cancels{0};
  poller.Add([&] { return ++runs, false; }, [&] { ++cancels; }, milliseconds(60000),
             milliseconds(60000));
  poller.Stop();
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(cancels.load(), 1);
  poller.Add([&] { return ++runs, true; }, [&] { ++cancels; });
  EXPECT_EQ(cancels.load(), 2);
  EXPECT_EQ(poller.pending(), 0u);
}

}  // namespace
}  // namespace stitch::daemon
