// Persistent (global_stitch) kernels get the smallest grid that gives every phase all the
// blocks it can use, capped by co-residency: a small graph gets a handful of blocks, a large
// one the co-resident bound, and the cost model prices the grid that is launched.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "stitch/ir/verifier.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/stitch_planner.h"
#include "stitch/plan/target.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::BatchNormStatistics;

const KernelSpec* GlobalKernel(const FusionPlan& plan) {
  for (const KernelSpec& k : plan.kernels) {
    if (k.kind == KernelKind::kGlobalStitch) return &k;
  }
  return nullptr;
}

TEST(PersistentGrid, SmallGraphGetsAHandfulOfBlocks) {
  Graph g = BatchNormStatistics(16, 7);
  ASSERT_TRUE(Verify(g).ok());
  for (const Target& target : Target::Supported()) {
    SCOPED_TRACE(target.name());
    StatusOr<FusionPlan> plan = PlanStitched(g, target.device());
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const KernelSpec* k = GlobalKernel(*plan);
    ASSERT_NE(k, nullptr) << Describe(g, *plan);
    // 112 elements: one 32-column tile, too few rows to split. Not the device's hundreds of
    // co-resident blocks.
    EXPECT_LE(k->mapping.launch.blocks(), 4u);
    EXPECT_LT(static_cast<int64_t>(k->mapping.launch.blocks()),
              CoResidentBlocks(target.device(), k->mapping));
    for (const KernelSpec& phase : k->phases) {
      EXPECT_EQ(phase.mapping.launch.grid, k->mapping.launch.grid) << phase.name;
    }
  }
}

TEST(PersistentGrid, LargeGraphIsCappedByCoResidency) {
  Graph g = BatchNormStatistics(1 << 16, 64);
  ASSERT_TRUE(Verify(g).ok());
  const GpuDevice& h100 = Target().device();
  StatusOr<FusionPlan> plan = PlanStitched(g, h100);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const KernelSpec* k = GlobalKernel(*plan);
  ASSERT_NE(k, nullptr) << Describe(g, *plan);
  EXPECT_EQ(static_cast<int64_t>(k->mapping.launch.blocks()), CoResidentBlocks(h100, k->mapping));
}

TEST(PersistentGrid, GridGrowsWithTheWorkUpToTheBound) {
  const GpuDevice& h100 = Target().device();
  uint64_t previous = 0;
  for (int64_t rows : {16, 256, 4096, 65536}) {
    Graph g = BatchNormStatistics(rows, 256);
    StatusOr<FusionPlan> plan = PlanStitched(g, h100);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const KernelSpec* k = GlobalKernel(*plan);
    ASSERT_NE(k, nullptr) << rows << " rows: " << Describe(g, *plan);
    const uint64_t blocks = k->mapping.launch.blocks();
    EXPECT_GE(blocks, previous) << rows << " rows";
    EXPECT_LE(static_cast<int64_t>(blocks), CoResidentBlocks(h100, k->mapping)) << rows << " rows";
    // The model prices the launched grid: its waves and residency are those of this grid.
    const KernelCost cost = NewAnalyticalCostModel(h100)->EstimateKernel(g, *k);
    EXPECT_TRUE(std::isfinite(cost.seconds)) << rows << " rows";
    previous = blocks;
  }
}

}  // namespace
}  // namespace stitch
