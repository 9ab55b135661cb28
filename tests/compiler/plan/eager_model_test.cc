// The eager model: one kernel per op, views free, and priced above the compiler models on
// the patterns fusion exists for.
#include "stitch/plan/eager_model.h"

#include <gtest/gtest.h>

#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

const GpuDevice& H100() { return *FindDevice("H100"); }

TEST(EagerModel, SoftmaxLaunchesOneKernelPerOpAndNoneForBroadcasts) {
  Graph g = testing::Softmax(256, 1024);
  ASSERT_TRUE(Verify(g).ok());
  StatusOr<FusionPlan> plan = PlanEagerModel(g, H100());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // max, subtract, exp, sum, divide: the two broadcasts are views the consumers read through.
  int reduces = 0, loops = 0;
  for (const KernelSpec& k : plan->kernels) {
    ASSERT_EQ(k.outputs.size(), 1u);
    EXPECT_GT(k.mapping.launch.block_threads(), 1u) << k.name << " is scheduled";
    (k.kind == KernelKind::kLoop ? loops : reduces) += 1;
    for (int n : k.nodes) {
      const OpCode op = g.nodes[static_cast<size_t>(n)].op;
      EXPECT_TRUE(n == k.outputs[0] || op == OpCode::kBroadcast || op == OpCode::kConstant)
          << k.name << " computes " << OpCodeName(op) << " besides its own op";
    }
  }
  EXPECT_EQ(reduces, 2);
  EXPECT_EQ(loops, 3);
  // Every intermediate goes through global memory: eager moves far more than one read and
  // one write of the input.
  const TrafficEstimate eager = EstimateTraffic(g, *plan);
  EXPECT_GT(eager.total(), 3 * TrafficLowerBound(g).total());
}

TEST(EagerModel, AReductionOfATransposeReadsTheParameterThroughTheView) {
  Graph g;
  const int x = testing::Param(g, {DType::kF32, {512, 256}}, 0);
  const int t = testing::Transpose(g, x, {1, 0});
  const int zero = testing::ConstScalar(g, DType::kF32, 0);
  const int sum = testing::Reduce(g, t, zero, {1}, ReduceKind::kSum);
  testing::Output(g, sum);
  ASSERT_TRUE(Verify(g).ok());
  StatusOr<FusionPlan> plan = PlanEagerModel(g, H100());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->kernels.size(), 1u);
  EXPECT_EQ(plan->kernels[0].inputs, std::vector<int>{x});
  EXPECT_EQ(plan->kernels[0].hero, sum);
}

TEST(EagerModel, CostsMoreThanEitherCompilerOnANormalization) {
  Graph g = testing::Softmax(4096, 768);
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(H100());
  StatusOr<FusionPlan> eager = PlanEagerModel(g, H100());
  ASSERT_TRUE(eager.ok());
  const double eager_seconds = model->Estimate(g, *eager).seconds;
  for (BaselineCompiler c : {BaselineCompiler::kXla, BaselineCompiler::kInductor}) {
    StatusOr<BaselinePlan> b = PlanBaselineModel(c, g, H100());
    ASSERT_TRUE(b.ok());
    EXPECT_GT(eager_seconds, model->Estimate(b->graph, b->plan).seconds) << BaselineCompilerName(c);
  }
}

}  // namespace
}  // namespace stitch
