// The daemon's persistent totals: savings by baseline survive a save and restore, and totals
// saved before savings carried a baseline are restored once, as "unreported".
#include "../../daemon/src/daemon_metrics.h"

#include <gtest/gtest.h>

namespace stitch::daemon {
namespace {

double Saved(const std::string& page, const std::string& baseline) {
  const std::string series = "stitch_gpu_seconds_saved_total{baseline=\"" + baseline + "\"} ";
  const size_t at = page.find(series);
  return at == std::string::npos ? -1 : std::stod(page.substr(at + series.size()));
}

TEST(DaemonMetricsTest, SavingsByBaselineSurviveASaveAndRestore) {
  metrics::Registry before;
  DaemonMetrics m(before, "v", "c", "sm_90");
  m.AddUsage(10, 2.5, "xla");
  m.AddUsage(4, 1.0, "inductor");
  m.AddUsage(1, 0.25, "unreported");
  EXPECT_DOUBLE_EQ(m.gpu_seconds_saved(), 3.75);
  EXPECT_DOUBLE_EQ(m.invocations(), 15);

  metrics::Registry after;
  DaemonMetrics restored(after, "v", "c", "sm_90");
  restored.RestoreTotals(m.PersistentTotals());
  const std::string page = after.Serialize();
  EXPECT_DOUBLE_EQ(Saved(page, "xla"), 2.5);
  EXPECT_DOUBLE_EQ(Saved(page, "inductor"), 1.0);
  EXPECT_DOUBLE_EQ(Saved(page, "unreported"), 0.25);
  EXPECT_DOUBLE_EQ(restored.invocations(), 15);
}

TEST(DaemonMetricsTest, TotalsSavedWithoutABaselineCountOnceAsUnreported) {
  metrics::Registry r1;
  DaemonMetrics old_store(r1, "v", "c", "sm_90");
  old_store.RestoreTotals({{"gpu_seconds_saved", 7.0}, {"invocations_reported", 70}});
  EXPECT_DOUBLE_EQ(Saved(r1.Serialize(), "unreported"), 7.0);
  // The store keeps the plain names beside the labelled ones it saves next; restoring both
  // must not count the old total twice.
  std::map<std::string, double> saved = old_store.PersistentTotals();
  saved["gpu_seconds_saved"] = 7.0;
  saved["invocations_reported"] = 70;
  metrics::Registry r2;
  DaemonMetrics next(r2, "v", "c", "sm_90");
  next.RestoreTotals(saved);
  EXPECT_DOUBLE_EQ(next.gpu_seconds_saved(), 7.0);
  EXPECT_DOUBLE_EQ(next.invocations(), 70);
}

}  // namespace
}  // namespace stitch::daemon
