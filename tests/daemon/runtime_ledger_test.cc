// The runtime ledger: timings merge per key and side, the model's figures ride along, changed
// records are handed out once for saving, the bound drops (and counts) new keys, and Top
// orders by samples. Random merges from a logged seed must equal a plain sum.
#include "../../daemon/src/runtime_ledger.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace stitch::daemon {
namespace {

v1::UsageRecord Record(const std::string& key, uint64_t invocations, uint64_t stitched_samples,
                       double stitched_seconds, uint64_t fallback_samples = 0,
                       double fallback_seconds = 0) {
  v1::UsageRecord r;
  r.set_key(key);
  r.set_invocations(invocations);
  if (stitched_samples > 0) {
    r.mutable_stitched()->set_samples(stitched_samples);
    r.mutable_stitched()->set_seconds(stitched_seconds);
  }
  if (fallback_samples > 0) {
    r.mutable_fallback()->set_samples(fallback_samples);
    r.mutable_fallback()->set_seconds(fallback_seconds);
  }
  return r;
}

v1::CostEstimate Cost() {
  v1::CostEstimate cost;
  cost.set_stitched_seconds(1e-5);
  cost.set_baseline_seconds(2e-5);
  v1::PlanEstimate* xla = cost.add_plans();
  xla->set_planner("xla");
  xla->set_seconds(3e-5);
  v1::PlanEstimate* stitch = cost.add_plans();
  stitch->set_planner("stitch");
  stitch->set_seconds(1e-5);
  return cost;
}

TEST(RuntimeLedgerTest, MergesTimingsPerSideAndKeepsTheModelBeside) {
  RuntimeLedger ledger(10);
  EXPECT_FALSE(ledger.Merge(Record("k", 100, 0, 0), "xla", Cost(), "sm_90", 1).has_value())
      << "invocations alone make no record";
  ledger.Merge(Record("k", 100, 2, 4e-5), "xla", Cost(), "sm_90", 2);
  const auto r = ledger.Merge(Record("k", 50, 2, 2e-5, 1, 3e-5), "xla", Cost(), "sm_90", 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->key(), "k");
  EXPECT_EQ(r->target(), "sm_90");
  EXPECT_EQ(r->invocations(), 150u);
  EXPECT_EQ(r->stitched().samples(), 4u);
  EXPECT_DOUBLE_EQ(r->stitched().seconds_sum(), 6e-5);
  EXPECT_DOUBLE_EQ(r->stitched().min_seconds(), 1e-5);
  EXPECT_DOUBLE_EQ(r->stitched().max_seconds(), 2e-5);
  EXPECT_EQ(r->stitched().reports(), 2u);
  EXPECT_EQ(r->fallback().at("xla").samples(), 1u);
  EXPECT_DOUBLE_EQ(r->modeled_stitched_seconds(), 1e-5);
  EXPECT_DOUBLE_EQ(r->modeled_fallback_seconds().at("xla"), 3e-5);
  EXPECT_DOUBLE_EQ(r->modeled_fallback_seconds().at("unreported"), 2e-5);
  EXPECT_FALSE(r->modeled_fallback_seconds().contains("stitch"));
  EXPECT_DOUBLE_EQ(r->last_report_unix_seconds(), 3);
}

TEST(RuntimeLedgerTest, ChangedRecordsAreHandedOutOnceAndAgainAfterAFailedSave) {
  RuntimeLedger ledger(10);
  ledger.Merge(Record("a", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1);
  ledger.Merge(Record("b", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1);
  std::vector<v1::KernelRuntimes> changed = ledger.TakeChanged();
  EXPECT_EQ(changed.size(), 2u);
  EXPECT_TRUE(ledger.TakeChanged().empty());
  ledger.MarkChanged(changed);
  EXPECT_EQ(ledger.TakeChanged().size(), 2u);
}

TEST(RuntimeLedgerTest, ABoundedLedgerDropsNewKeysAndCountsThem) {
  RuntimeLedger ledger(2);
  ledger.Merge(Record("a", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1);
  ledger.Merge(Record("b", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1);
  EXPECT_FALSE(ledger.Merge(Record("c", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1).has_value());
  EXPECT_TRUE(ledger.Merge(Record("a", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1).has_value());
  EXPECT_EQ(ledger.size(), 2u);
  EXPECT_EQ(ledger.dropped(), 1u);
  // Restoring past the bound drops too.
  RuntimeLedger small(1);
  v1::KernelRuntimes x, y;
  x.set_key("x");
  y.set_key("y");
  small.Restore({x, y});
  EXPECT_EQ(small.size(), 1u);
  EXPECT_EQ(small.dropped(), 1u);
}

TEST(RuntimeLedgerTest, TopOrdersByMeasuredSamples) {
  RuntimeLedger ledger(10);
  ledger.Merge(Record("few", 1, 1, 1e-5), "xla", Cost(), "sm_90", 1);
  ledger.Merge(Record("many", 1, 5, 1e-5, 5, 1e-5), "xla", Cost(), "sm_90", 1);
  ledger.Merge(Record("some", 1, 3, 1e-5), "xla", Cost(), "sm_90", 1);
  const std::vector<v1::KernelRuntimes> top = ledger.Top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].key(), "many");
  EXPECT_EQ(top[1].key(), "some");
}

TEST(RuntimeLedgerTest, RandomMergesEqualAPlainSum) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  RuntimeLedger ledger(100);
  std::map<std::string, std::pair<uint64_t, double>> stitched, fallback;
  for (int i = 0; i < 500; ++i) {
    const std::string key = "k" + std::to_string(rng() % 7);
    const uint64_t s = rng() % 4, f = rng() % 3;
    const double st = s * 1e-6 * (1 + rng() % 50), ft = f * 1e-6 * (1 + rng() % 50);
    ledger.Merge(Record(key, 1, s, st, f, ft), "eager", Cost(), "sm_80", i);
    if (s > 0) stitched[key].first += s, stitched[key].second += st;
    if (f > 0) fallback[key].first += f, fallback[key].second += ft;
  }
  for (const v1::KernelRuntimes& r : ledger.Top(100)) {
    EXPECT_EQ(r.stitched().samples(), stitched[r.key()].first) << r.key();
    EXPECT_NEAR(r.stitched().seconds_sum(), stitched[r.key()].second, 1e-12) << r.key();
    const uint64_t f = r.fallback().contains("eager") ? r.fallback().at("eager").samples() : 0;
    EXPECT_EQ(f, fallback[r.key()].first) << r.key();
  }
}

}  // namespace
}  // namespace stitch::daemon
