// The daemon's persistent totals: savings by baseline and basis, the model-only figure, time
// lost and measured samples survive a save and restore; totals saved before savings carried a
// baseline are restored once, as "unreported"; the per-key gauges follow the top keys.
#include "../../daemon/src/daemon_metrics.h"

#include <gtest/gtest.h>

namespace stitch::daemon {
namespace {

// The value of the sample `series` (name with its labels, as serialized), or -1 when absent.
double Sample(const std::string& page, const std::string& series) {
  const std::string line = "\n" + series + " ";
  const size_t at = page.find(line);
  return at == std::string::npos ? -1 : std::stod(page.substr(at + line.size()));
}

double Saved(const std::string& page, const std::string& baseline, const std::string& basis) {
  return Sample(page, "stitch_gpu_seconds_saved_total{baseline=\"" + baseline + "\",basis=\"" +
                          basis + "\"}");
}

UsagePrice Modeled(const std::string& baseline, double per_call) {
  return UsagePrice{baseline, per_call, false, per_call};
}

UsagePrice Measured(const std::string& baseline, double modeled, double measured) {
  return UsagePrice{baseline, modeled, true, measured};
}

TEST(DaemonMetricsTest, SavingsByBaselineAndBasisSurviveASaveAndRestore) {
  metrics::Registry before;
  DaemonMetrics m(before, "v", "c", "sm_90");
  m.AddUsage(10, Modeled("xla", 0.25));
  m.AddUsage(4, Modeled("inductor", 0.25));
  m.AddUsage(1, Modeled("unreported", 0.25));
  m.AddUsage(2, Measured("xla", 0.5, 0.75));      // the model undersold this key
  m.AddUsage(3, Measured("eager", 0.5, -0.125));  // jobs timed it slower than eager
  m.AddMeasuredSamples(7, 2);
  EXPECT_DOUBLE_EQ(m.gpu_seconds_saved(), 3.75 + 1.5);
  EXPECT_DOUBLE_EQ(m.gpu_seconds_saved_measured(), 1.5);
  EXPECT_DOUBLE_EQ(m.gpu_seconds_lost(), 0.375);
  EXPECT_DOUBLE_EQ(m.invocations(), 20);

  metrics::Registry after;
  DaemonMetrics restored(after, "v", "c", "sm_90");
  restored.RestoreTotals(m.PersistentTotals());
  const std::string page = after.Serialize();
  EXPECT_DOUBLE_EQ(Saved(page, "xla", "modeled"), 2.5);
  EXPECT_DOUBLE_EQ(Saved(page, "xla", "measured"), 1.5);
  EXPECT_DOUBLE_EQ(Saved(page, "inductor", "modeled"), 1.0);
  EXPECT_DOUBLE_EQ(Saved(page, "unreported", "modeled"), 0.25);
  EXPECT_DOUBLE_EQ(Saved(page, "eager", "measured"), 0);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_gpu_seconds_lost_total{baseline=\"eager\"}"), 0.375);
  // The model's own figure covers the measured invocations too.
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_model_gpu_seconds_saved_total{baseline=\"xla\"}"), 3.5);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_model_gpu_seconds_saved_total{baseline=\"eager\"}"), 1.5);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_measured_samples_total{kernels=\"stitched\"}"), 7);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_measured_samples_total{kernels=\"fallback\"}"), 2);
  EXPECT_DOUBLE_EQ(restored.invocations(), 20);
}

TEST(DaemonMetricsTest, TotalsSavedWithoutABaselineCountOnceAsUnreported) {
  metrics::Registry r1;
  DaemonMetrics old_store(r1, "v", "c", "sm_90");
  old_store.RestoreTotals({{"gpu_seconds_saved", 7.0}, {"invocations_reported", 70}});
  EXPECT_DOUBLE_EQ(Saved(r1.Serialize(), "unreported", "modeled"), 7.0);
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

TEST(DaemonMetricsTest, AStoreFromBeforeMeasurementsRestoresTheModelOnlyTotalFromTheModeledOne) {
  metrics::Registry r;
  DaemonMetrics m(r, "v", "c", "sm_90");
  m.RestoreTotals({{"gpu_seconds_saved.xla", 4.0}, {"invocations_reported.xla", 8}});
  const std::string page = r.Serialize();
  EXPECT_DOUBLE_EQ(Saved(page, "xla", "modeled"), 4.0);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_model_gpu_seconds_saved_total{baseline=\"xla\"}"), 4.0);
}

v1::KernelRuntimes Runtimes(const std::string& key, double stitched, double xla) {
  v1::KernelRuntimes r;
  r.set_key(key);
  r.mutable_stitched()->set_samples(4);
  r.mutable_stitched()->set_seconds_sum(4 * stitched);
  (*r.mutable_fallback())["xla"].set_samples(2);
  (*r.mutable_fallback())["xla"].set_seconds_sum(2 * xla);
  r.set_modeled_stitched_seconds(1e-5);
  (*r.mutable_modeled_fallback_seconds())["xla"] = 3e-5;
  return r;
}

TEST(DaemonMetricsTest, PerKeyGaugesFollowTheTopKeysAndDropThoseThatLeave) {
  metrics::Registry r;
  DaemonMetrics m(r, "v", "c", "sm_90");
  m.SetRuntimeRecords({Runtimes("aa", 2e-5, 5e-5)}, 9, 1);
  std::string page = r.Serialize();
  EXPECT_DOUBLE_EQ(
      Sample(page,
             "stitch_key_seconds_per_call{basis=\"measured\",kernels=\"stitched\",key=\"aa\"}"),
      2e-5);
  EXPECT_DOUBLE_EQ(
      Sample(page, "stitch_key_seconds_per_call{basis=\"modeled\",kernels=\"xla\",key=\"aa\"}"),
      3e-5);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_runtime_keys"), 9);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_runtime_records_dropped_total"), 1);

  m.SetRuntimeRecords({Runtimes("bb", 1e-5, 2e-5)}, 9, 1);
  page = r.Serialize();
  EXPECT_EQ(page.find("key=\"aa\""), std::string::npos);
  EXPECT_DOUBLE_EQ(
      Sample(page, "stitch_key_seconds_per_call{basis=\"measured\",kernels=\"xla\",key=\"bb\"}"),
      2e-5);
  EXPECT_DOUBLE_EQ(Sample(page, "stitch_runtime_records_dropped_total"), 1);
}

}  // namespace
}  // namespace stitch::daemon
