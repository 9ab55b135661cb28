// Persistent (global_stitch) kernels get the smallest grid that gives every phase all the
// blocks it can use, capped by co-residency: a small graph gets a handful of blocks, a large
// one the co-resident bound, and the cost model prices the grid that is launched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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
  // Statistics of 256 rows are two column reductions of their own, their epilogues in them
  // (FusionRules::reduce_epilogues), which the model prices below a global kernel's barrier.
  for (int64_t rows : {16, 512, 4096, 65536}) {
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
       {std::tuple<int64_t, int64_t, int>{1 << 16, 64, 2}, {1 << 14, 4096, 4}, {128, 256, 1}}) {
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

// Batch norm's forward pass over x[rows, cols] in training: the statistics over the rows,
// then every element normalized by its column's. The plan computes the statistics in a global
// kernel's column phases and normalizes in a loop after them.
Graph BatchNormForward(int64_t rows, int64_t cols) {
  Graph g = BatchNormStatistics(rows, cols);
  const int centred = g.outputs[0];
  const int var = g.outputs[1];
  const int eps = testing::Broadcast(g, testing::ConstScalar(g, DType::kF32, 1e-5), {cols}, {});
  const int rstd = testing::Unary(g, OpCode::kRsqrt, testing::Binary(g, OpCode::kAdd, var, eps));
  const int y =
      testing::Binary(g, OpCode::kMul, centred, testing::Broadcast(g, rstd, {rows, cols}, {1}));
  g.outputs = {y};
  return g;
}

std::set<int> Outputs(const std::vector<KernelSpec>& kernels) {
  std::set<int> out;
  for (const KernelSpec& k : kernels) out.insert(k.outputs.begin(), k.outputs.end());
  return out;
}

// gpu_bench --mappings times a global kernel's last loop phase apart, and a loop kernel
// joined to the global kernel before it: the two regroupings undo each other.
TEST(PhaseRegroupings, ALoopPhaseComesApartAndJoinsBackAsItWas) {
  Graph g = BatchNormForward(1 << 16, 64);
  ASSERT_TRUE(Verify(g).ok());
  const GpuDevice& h100 = Target().device();
  StatusOr<FusionPlan> plan = PlanStitched(g, h100);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->kernels.size(), 1u) << Describe(g, *plan);
  const KernelSpec& global = plan->kernels[0];
  ASSERT_EQ(global.kind, KernelKind::kGlobalStitch) << Describe(g, *plan);
  ASSERT_GE(global.phases.size(), 2u);
  ASSERT_EQ(global.phases.back().kind, KernelKind::kLoop) << Describe(g, *plan);

  const std::vector<KernelRegrouping> apart = PhaseRegroupings(g, *plan, h100);
  ASSERT_GE(apart.size(), 2u);
  std::set<std::tuple<uint32_t, uint32_t, int, int64_t>> loop_mappings;
  for (const KernelRegrouping& r : apart) {
    EXPECT_EQ(r.first, 0);
    EXPECT_EQ(r.span, 1);
    ASSERT_EQ(r.kernels.size(), 2u);
    const KernelSpec& head = r.kernels[0];
    const KernelSpec& loop = r.kernels[1];
    EXPECT_EQ(head.kind, KernelKind::kGlobalStitch);
    EXPECT_EQ(head.phases.size(), global.phases.size() - 1);
    EXPECT_EQ(head.name, global.name);
    EXPECT_EQ(head.phases[0].name, global.phases[0].name);
    EXPECT_EQ(loop.kind, KernelKind::kLoop);
    EXPECT_TRUE(loop.phases.empty());
    EXPECT_EQ(loop.name, global.name + "_loop");
    EXPECT_GT(loop.mapping.launch.blocks(), 0u);
    // What the global kernel wrote, the two write; the loop reads the statistics the head
    // writes.
    EXPECT_EQ(Outputs(r.kernels), Outputs({global}));
    for (int in : loop.inputs) {
      const bool parameter = g.nodes[in].op == OpCode::kParameter;
      EXPECT_TRUE(parameter || Outputs({head}).count(in)) << "%" << in;
    }
    const ThreadMapping& m = loop.mapping;
    EXPECT_TRUE(
        loop_mappings.insert({m.launch.block[0], m.launch.grid[0], m.vector_width, m.column_period})
            .second)
        << "a loop mapping twice";
  }

  // The first apart, as a plan of two kernels, joins back into the global kernel it was.
  FusionPlan two;
  two.kernels = apart[0].kernels;
  const std::vector<KernelRegrouping> joined = PhaseRegroupings(g, two, h100);
  ASSERT_FALSE(joined.empty());
  const KernelRegrouping& back = joined.back();
  EXPECT_EQ(back.first, 0);
  EXPECT_EQ(back.span, 2);
  ASSERT_EQ(back.kernels.size(), 1u);
  const KernelSpec& rejoined = back.kernels[0];
  ASSERT_EQ(rejoined.phases.size(), global.phases.size());
  EXPECT_EQ(rejoined.nodes, global.nodes);
  EXPECT_EQ(rejoined.inputs, global.inputs);
  EXPECT_EQ(rejoined.outputs, global.outputs);
  EXPECT_EQ(rejoined.mapping.launch.grid, global.mapping.launch.grid);
  for (size_t p = 0; p < global.phases.size(); ++p) {
    EXPECT_EQ(rejoined.phases[p].name, global.phases[p].name);
    EXPECT_EQ(rejoined.phases[p].kind, global.phases[p].kind);
  }
}

// A plan without a global kernel has nothing to regroup: a softmax's row kernel.
TEST(PhaseRegroupings, APlanWithoutGlobalKernelsHasNone) {
  Graph g = testing::Softmax(4096, 1024);
  StatusOr<FusionPlan> plan = PlanStitched(g, Target().device());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(GlobalKernel(*plan), nullptr) << Describe(g, *plan);
  EXPECT_TRUE(PhaseRegroupings(g, *plan, Target().device()).empty());
}

// Kernels of the same code: names, edges and what the assembler reported are not the code;
// a mapping's vector width, a grid, a phase's mapping and the nodes are.
TEST(SameCode, NamesEdgesAndAssemblerFiguresAreNotTheCode) {
  Graph g = BatchNormStatistics(1 << 16, 64);
  StatusOr<FusionPlan> plan = PlanStitched(g, Target().device());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const KernelSpec* global = GlobalKernel(*plan);
  ASSERT_NE(global, nullptr) << Describe(g, *plan);
  ASSERT_FALSE(global->phases.empty());
  ASSERT_FALSE(global->edges.empty());

  KernelSpec renamed = *global;
  renamed.name = "another_name";
  renamed.phases[0].name = "another_phase";
  renamed.edges.clear();
  renamed.mapping.assembled_registers = 40;
  renamed.phases[0].mapping.assembled_instructions = 700;
  EXPECT_TRUE(SameCode(*global, renamed));
  EXPECT_TRUE(SameCode(renamed, *global));

  KernelSpec wider = *global;
  wider.phases[0].mapping.vector_width *= 2;
  EXPECT_FALSE(SameCode(*global, wider));
  KernelSpec regridded = *global;
  regridded.mapping.launch.grid[0] += 1;
  EXPECT_FALSE(SameCode(*global, regridded));
  KernelSpec fewer = *global;
  fewer.nodes.pop_back();
  EXPECT_FALSE(SameCode(*global, fewer));
}

}  // namespace
}  // namespace stitch
