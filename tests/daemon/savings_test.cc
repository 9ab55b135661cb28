// Pricing a reported invocation: the job's fallback picks the model's baseline, measured times
// replace the model once both sides have enough samples, and a measured regression is priced
// as negative.
#include "../../daemon/src/savings.h"

#include <gtest/gtest.h>

#include <limits>

namespace stitch::daemon {
namespace {

v1::CostEstimate Cost() {
  v1::CostEstimate cost;
  cost.set_stitched_seconds(10e-6);
  cost.set_baseline_seconds(30e-6);  // the better of the XLA and Inductor models
  for (const auto& [planner, seconds] : {std::pair<const char*, double>{"stitch", 10e-6},
                                         {"xla", 40e-6},
                                         {"inductor", 30e-6},
                                         {"eager", 90e-6}}) {
    v1::PlanEstimate* plan = cost.add_plans();
    plan->set_planner(planner);
    plan->set_seconds(seconds);
  }
  return cost;
}

void Time(v1::TimingSummary& t, uint64_t samples, double mean) {
  t.set_samples(samples);
  t.set_seconds_sum(mean * static_cast<double>(samples));
}

TEST(SavingsTest, TheJobsFallbackPicksTheModelsBaseline) {
  const v1::CostEstimate cost = Cost();
  struct Case {
    v1::Fallback fallback;
    const char* baseline;
    double saved;
  };
  for (const Case& c :
       {Case{v1::FALLBACK_XLA, "xla", 30e-6}, Case{v1::FALLBACK_INDUCTOR, "inductor", 20e-6},
        Case{v1::FALLBACK_EAGER, "eager", 80e-6},
        Case{v1::FALLBACK_UNSPECIFIED, "unreported", 20e-6}}) {
    const UsagePrice p = PriceUsage(cost, c.fallback, nullptr);
    EXPECT_EQ(p.baseline, c.baseline);
    EXPECT_FALSE(p.measured);
    EXPECT_DOUBLE_EQ(p.per_call, c.saved) << c.baseline;
    EXPECT_DOUBLE_EQ(p.modeled_per_call, c.saved) << c.baseline;
  }
}

TEST(SavingsTest, ABundleWithoutTheNamedModelIsPricedAsUnreported) {
  v1::CostEstimate cost = Cost();
  cost.mutable_plans()->RemoveLast();  // no eager estimate
  const UsagePrice p = PriceUsage(cost, v1::FALLBACK_EAGER, nullptr);
  EXPECT_EQ(p.baseline, "unreported");
  EXPECT_DOUBLE_EQ(p.per_call, 20e-6);
}

TEST(SavingsTest, AnUnpricedPlanCreditsNothingInfinite) {
  v1::CostEstimate cost = Cost();
  cost.mutable_plans(1)->set_seconds(std::numeric_limits<double>::infinity());  // xla
  UsagePrice p = PriceUsage(cost, v1::FALLBACK_XLA, nullptr);
  EXPECT_EQ(p.baseline, "unreported");
  EXPECT_DOUBLE_EQ(p.per_call, 20e-6);
  cost.set_baseline_seconds(std::numeric_limits<double>::infinity());
  p = PriceUsage(cost, v1::FALLBACK_XLA, nullptr);
  EXPECT_EQ(p.per_call, 0);
  EXPECT_EQ(p.modeled_per_call, 0);
}

TEST(SavingsTest, MeasuredTimesOnBothSidesReplaceTheModel) {
  v1::KernelRuntimes r;
  Time(*r.mutable_stitched(), 5, 12e-6);
  Time((*r.mutable_fallback())["xla"], 3, 50e-6);
  const UsagePrice p = PriceUsage(Cost(), v1::FALLBACK_XLA, &r);
  EXPECT_TRUE(p.measured);
  EXPECT_EQ(p.baseline, "xla");
  EXPECT_NEAR(p.per_call, 38e-6, 1e-15);
  EXPECT_DOUBLE_EQ(p.modeled_per_call, 30e-6);
}

TEST(SavingsTest, TooFewSamplesOrAnotherBaselinesTimingsLeaveTheModel) {
  v1::KernelRuntimes r;
  Time(*r.mutable_stitched(), 5, 12e-6);
  Time((*r.mutable_fallback())["xla"], kMinMeasuredSamples - 1, 50e-6);
  EXPECT_FALSE(PriceUsage(Cost(), v1::FALLBACK_XLA, &r).measured);
  Time((*r.mutable_fallback())["inductor"], 10, 50e-6);
  EXPECT_FALSE(PriceUsage(Cost(), v1::FALLBACK_XLA, &r).measured);
  EXPECT_TRUE(PriceUsage(Cost(), v1::FALLBACK_INDUCTOR, &r).measured);
  // Only the fallback timed: the stitched side is missing.
  v1::KernelRuntimes fallback_only;
  Time((*fallback_only.mutable_fallback())["xla"], 10, 50e-6);
  EXPECT_FALSE(PriceUsage(Cost(), v1::FALLBACK_XLA, &fallback_only).measured);
}

TEST(SavingsTest, AMeasuredRegressionIsNegative) {
  v1::KernelRuntimes r;
  Time(*r.mutable_stitched(), 4, 60e-6);
  Time((*r.mutable_fallback())["unreported"], 4, 45e-6);
  const UsagePrice p = PriceUsage(Cost(), v1::FALLBACK_UNSPECIFIED, &r);
  EXPECT_TRUE(p.measured);
  EXPECT_NEAR(p.per_call, -15e-6, 1e-15);
  EXPECT_DOUBLE_EQ(p.modeled_per_call, 20e-6);
}

}  // namespace
}  // namespace stitch::daemon
