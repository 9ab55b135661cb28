// Persistent (global_stitch) kernels get the smallest grid that gives every phase all the
// blocks it can use, capped by co-residency: a small graph gets a handful of blocks, a large
// one the co-resident bound, and the cost model prices the grid that is launched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

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

// A phase that splits its reduction gives every block of the grid a fair share: the block
// with the most work walks at most 5% more of the reduced rows than an even split would give
// it. A block without a work item only waits at the next grid barrier (the H100 spent 60% of
// one such kernel's warp time there, with half its grid idle).
TEST(PersistentGrid, SplitPhasesGiveEveryBlockAShare) {
  const GpuDevice& h100 = Target().device();
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{1 << 16, 64}, {1 << 16, 96}, {1 << 15, 768}, {1 << 14, 4096}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    Graph g = BatchNormStatistics(rows, cols);
    StatusOr<FusionPlan> plan = PlanStitched(g, h100);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const KernelSpec* k = GlobalKernel(*plan);
    ASSERT_NE(k, nullptr) << Describe(g, *plan);
    const int64_t blocks = static_cast<int64_t>(k->mapping.launch.blocks());
    int split = 0;
    for (const KernelSpec& phase : k->phases) {
      if (phase.kind != KernelKind::kColumnReduce || phase.mapping.reduce_chunks <= 1) continue;
      ++split;
      const int64_t tile = 32 * std::max(phase.mapping.vector_width, 1);
      const int64_t items = (cols + tile - 1) / tile;
      const int64_t chunks = phase.mapping.reduce_chunks;
      const double busiest =
          static_cast<double>((items * chunks + blocks - 1) / blocks) / static_cast<double>(chunks);
      EXPECT_LE(busiest, 1.05 * static_cast<double>(items) / static_cast<double>(blocks))
          << phase.name << ": " << items << " tiles x " << chunks << " chunks on " << blocks
          << " blocks\n"
          << Describe(g, *plan);
    }
    EXPECT_GT(split, 0) << Describe(g, *plan);
  }
}

// A column phase's lane takes adjacent kept columns, as many as one 16-byte access holds,
// where its tile of 32 lanes stays within the kept columns and the phase keeps work for the
// whole grid: 64 f32 channels make one 256-byte row per warp (two per lane), 4096 make tiles
// of 4 per lane, and a small graph keeps one, since wider tiles would starve its grid.
TEST(PersistentGrid, ColumnPhasesTakeAdjacentColumnsPerLane) {
  const GpuDevice& h100 = Target().device();
  for (const auto& [rows, cols, width] :
       {std::tuple<int64_t, int64_t, int>{1 << 16, 64, 2}, {1 << 14, 4096, 4}, {256, 256, 1}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    Graph g = BatchNormStatistics(rows, cols);
    StatusOr<FusionPlan> plan = PlanStitched(g, h100);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const KernelSpec* k = GlobalKernel(*plan);
    ASSERT_NE(k, nullptr) << Describe(g, *plan);
    int columns = 0;
    for (const KernelSpec& phase : k->phases) {
      if (phase.kind != KernelKind::kColumnReduce) continue;
      ++columns;
      EXPECT_EQ(phase.mapping.vector_width, width) << phase.name << "\n" << Describe(g, *plan);
      // The tiles cover the kept columns once.
      EXPECT_EQ(phase.mapping.work_items % ((cols + 32 * width - 1) / (32 * width)), 0)
          << phase.name;
    }
    EXPECT_GT(columns, 0) << Describe(g, *plan);
  }
}

}  // namespace
}  // namespace stitch
