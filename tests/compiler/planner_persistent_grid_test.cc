// Persistent (global_stitch) kernels get the smallest grid that gives every phase all the
// blocks it can use, capped by co-residency: a small graph gets a handful of blocks, a large
// one the co-resident bound, and the cost model prices the grid that is launched.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "stitch/compiler/cost_model.h"
#include "stitch/compiler/stitch_planner.h"
#include "stitch/compiler/target.h"
#include "stitch/compiler/verifier.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Param;
using testing::Reduce;

// The batch-norm statistics of x[rows, cols] over its rows: the column mean, then the column
// variance of x - mean, and the centred values. The variance reads the mean of every row, so
// the plan needs a grid barrier between the two column reductions.
Graph ColumnStatistics(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "column_statistics";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int zero = ConstScalar(g, DType::kF32, 0);
  int inv_rows = Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / rows), {cols}, {});
  int mean = Binary(g, OpCode::kMul, Reduce(g, x, zero, {0}, ReduceKind::kSum), inv_rows);
  int centred = Binary(g, OpCode::kSub, x, Broadcast(g, mean, {rows, cols}, {1}));
  int square = Binary(g, OpCode::kMul, centred, centred);
  int var = Binary(g, OpCode::kMul, Reduce(g, square, zero, {0}, ReduceKind::kSum), inv_rows);
  g.outputs = {centred, var};
  return g;
}

const KernelSpec* GlobalKernel(const FusionPlan& plan) {
  for (const KernelSpec& k : plan.kernels) {
    if (k.kind == KernelKind::kGlobalStitch) return &k;
  }
  return nullptr;
}

TEST(PersistentGrid, SmallGraphGetsAHandfulOfBlocks) {
  Graph g = ColumnStatistics(16, 7);
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
  Graph g = ColumnStatistics(1 << 16, 64);
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
    Graph g = ColumnStatistics(rows, 256);
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
