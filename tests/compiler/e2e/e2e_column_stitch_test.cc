// Row-stitched kernels with column reduces (row_stitch.h): layernorm backward computes dx
// with row reductions and dgamma, dbeta by reducing over the rows. One global_stitch kernel
// reads dy and x once: each thread keeps its columns' partial sums in registers across its
// rows, blocks leave one partial per column in the workspace, and after a grid barrier the
// partials are combined. Every such kernel matches the interpreter on the emulator in
// random thread order; the analysis refuses what the emitter cannot do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "stitch/driver/compile.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/plan/schedule.h"
#include "stitch/plan/stitch_planner.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Convert;
using testing::Param;
using testing::Reduce;
using testing::Unary;

struct LayerNormBackward {
  Graph g;
  int dgamma = -1, dbeta = -1;  // the column reduces
};

// Layernorm backward over the last dimension of `dims`, given the forward's mean and rstd:
// dx (row reductions of dy * gamma and dy * gamma * xhat), dgamma = sum over rows of
// dy * xhat and dbeta = sum over rows of dy, each output in `t`.
LayerNormBackward MakeLayerNormBackward(const std::vector<int64_t>& dims, DType t) {
  LayerNormBackward ln;
  Graph& g = ln.g;
  g.name = "layernorm_bwd";
  const int64_t h = static_cast<int64_t>(dims.size()) - 1;
  const int64_t cols = dims.back();
  const std::vector<int64_t> row_dims(dims.begin(), dims.end() - 1);
  std::vector<int64_t> row_axes;
  for (int64_t d = 0; d < h; ++d) row_axes.push_back(d);
  auto f32 = [&](int v) { return t == DType::kF32 ? v : Convert(g, v, DType::kF32); };
  auto out = [&](int v) { return t == DType::kF32 ? v : Convert(g, v, t); };
  auto per_row = [&](int v) { return Broadcast(g, v, dims, row_axes); };
  int dy = f32(Param(g, {t, dims}, 0, "dy"));
  int x = f32(Param(g, {t, dims}, 1, "x"));
  int mean = Param(g, {DType::kF32, row_dims}, 2, "mean");
  int rstd = Param(g, {DType::kF32, row_dims}, 3, "rstd");
  int gamma = f32(Param(g, {t, {cols}}, 4, "gamma"));
  int zero = ConstScalar(g, DType::kF32, 0);
  int inv_n =
      Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / static_cast<double>(cols)), row_dims, {});
  int xhat = Binary(g, OpCode::kMul, Binary(g, OpCode::kSub, x, per_row(mean)), per_row(rstd));
  int gy = Binary(g, OpCode::kMul, dy, Broadcast(g, gamma, dims, {h}));
  int mean_g = Binary(g, OpCode::kMul, Reduce(g, gy, zero, {h}, ReduceKind::kSum), inv_n);
  int mean_gx =
      Binary(g, OpCode::kMul,
             Reduce(g, Binary(g, OpCode::kMul, gy, xhat), zero, {h}, ReduceKind::kSum), inv_n);
  int dx = Binary(g, OpCode::kMul, per_row(rstd),
                  Binary(g, OpCode::kSub, Binary(g, OpCode::kSub, gy, per_row(mean_g)),
                         Binary(g, OpCode::kMul, xhat, per_row(mean_gx))));
  ln.dgamma = Reduce(g, Binary(g, OpCode::kMul, dy, xhat), zero, row_axes, ReduceKind::kSum);
  ln.dbeta = Reduce(g, dy, zero, row_axes, ReduceKind::kSum);
  g.outputs = {out(dx), out(ln.dgamma), out(ln.dbeta)};
  return ln;
}

const GpuDevice& H100() { return *FindDevice("H100"); }

// Compiles `g` for the emulator, runs it in random order from `seed`, compares every
// output with the interpreter and returns the compiled plan. Column sums add the blocks'
// partials in another order than the interpreter: a looser bound.
FusionPlan CompileAndCheck(const Graph& g, uint64_t seed) {
  std::printf("graph %s %s, seed %llu\n", g.name.c_str(), g.nodes[0].shape.ToString().c_str(),
              static_cast<unsigned long long>(seed));
  EXPECT_TRUE(Verify(g).ok());
  testing::EmulatorCheck check;
  EXPECT_TRUE(testing::CheckOnEmulator(g, seed, /*random_order=*/true, &check,
                                       /*tolerance_scale=*/4));
  return check.compiled.plan;
}

// The row-stitched phase with column reduces of a one-kernel plan, or null.
const KernelSpec* ColumnStitchPhase(const FusionPlan& plan) {
  if (plan.kernels.size() != 1 || plan.kernels[0].kind != KernelKind::kGlobalStitch) {
    return nullptr;
  }
  for (const KernelSpec& p : plan.kernels[0].phases) {
    if (p.kind == KernelKind::kRowStitch && p.mapping.reduce_chunks > 1) return &p;
  }
  return nullptr;
}

TEST(ColumnStitch, LayerNormBackwardIsOneKernelThatCombinesColumnPartialsAfterAGridBarrier) {
  // Rows enough that re-reading dy and x in a column-reduction phase costs more than the
  // column partials; at half as many the planner prefers the second phase.
  LayerNormBackward ln = MakeLayerNormBackward({4096, 768}, DType::kF32);
  FusionPlan plan = CompileAndCheck(ln.g, 21);
  const KernelSpec* phase = ColumnStitchPhase(plan);
  ASSERT_NE(phase, nullptr) << Describe(ln.g, plan);
  const KernelSpec& k = plan.kernels[0];
  // One partial per block: the chunks are the grid's blocks, combined behind one barrier.
  EXPECT_EQ(phase->mapping.reduce_chunks, static_cast<int>(k.mapping.launch.grid[0]));
  EXPECT_EQ(k.mapping.grid_barriers, 1);
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(ln.g, *phase);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->column_reduces, (std::vector<int>{ln.dgamma, ln.dbeta}));
  EXPECT_EQ(layout->phases.size(), 1u);  // both row sums in one pass
  // dy and x are read by the row pass and the output pass: they stay in registers.
  EXPECT_GT(phase->mapping.values_per_thread, 0);
  EXPECT_EQ(layout->cached.size(), 2u);
}

TEST(ColumnStitch, FullSizeLayerNormBackwardReadsItsInputsOnce) {
  LayerNormBackward ln = MakeLayerNormBackward({16384, 768}, DType::kF32);
  StatusOr<FusionPlan> plan = PlanStitched(ln.g, H100());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const KernelSpec* phase = ColumnStitchPhase(*plan);
  ASSERT_NE(phase, nullptr) << Describe(ln.g, *plan);
  // The footprint plus the partials, written once and read once: 8 bytes per column and
  // block (two f32 sums).
  const KernelSpec& k = plan->kernels[0];
  const int64_t partials = 8 * 768 * int64_t{k.mapping.launch.grid[0]};
  EXPECT_EQ(k.mapping.bytes_loaded + k.mapping.bytes_stored,
            TrafficLowerBound(ln.g).total() + 2 * partials);
}

TEST(ColumnStitch, HalfPrecisionOutputsAreComputedFromTheCombinedColumns) {
  LayerNormBackward ln = MakeLayerNormBackward({4, 50, 96}, DType::kF16);
  FusionPlan plan = CompileAndCheck(ln.g, 22);
  const KernelSpec* phase = ColumnStitchPhase(plan);
  ASSERT_NE(phase, nullptr) << Describe(ln.g, plan);
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(ln.g, *phase);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  // The f16 conversions of dgamma and dbeta are the column outputs; the sums reach them
  // through the workspace, behind the grid barrier.
  EXPECT_EQ(layout->column_outputs, (std::vector<int>{ln.g.outputs[1], ln.g.outputs[2]}));
  int column_edges = 0;
  for (const StitchEdge& e : phase->edges) {
    if ((e.producer == ln.dgamma || e.producer == ln.dbeta) && e.scheme == StitchScheme::kGlobal) {
      ++column_edges;
    }
  }
  EXPECT_EQ(column_edges, 2) << Describe(ln.g, plan);
}

// Short rows: several row groups per block hold partials of the same columns and combine
// them in shared memory before the block stores its partial. A max over the rows also
// checks that groups past the last row contribute the identity.
TEST(ColumnStitch, RowGroupsOfABlockCombineTheirColumnsInSharedMemory) {
  Graph g;
  g.name = "column_max";
  // Rows enough that the partials beat re-reading x in a column-reduction phase.
  const int64_t rows = 3333, cols = 24;
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int row_max = Reduce(g, x, ConstScalar(g, DType::kF32, -1e30), {1}, ReduceKind::kMax);
  int shifted =
      Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, x, Broadcast(g, row_max, {rows, cols}, {0})));
  int col_max = Reduce(g, shifted, ConstScalar(g, DType::kF32, -1e30), {0}, ReduceKind::kMax);
  g.outputs = {shifted, col_max};
  FusionPlan plan = CompileAndCheck(g, 23);
  const KernelSpec* phase = ColumnStitchPhase(plan);
  ASSERT_NE(phase, nullptr) << Describe(g, plan);
  EXPECT_LE(phase->mapping.threads_per_row, 32);
  EXPECT_GT(static_cast<int>(phase->mapping.launch.block_threads()), phase->mapping.threads_per_row)
      << Describe(g, plan);
}

TEST(ColumnStitch, RandomShapesMatchTheInterpreter) {
  const uint64_t base = std::random_device{}();
  std::printf("base seed %llu\n", static_cast<unsigned long long>(base));
  std::mt19937_64 rng(base);
  int stitched = 0;
  for (int i = 0; i < 6; ++i) {
    std::uniform_int_distribution<int64_t> batch(1, 6), rows(1, 300), cols(2, 1000);
    const DType t = i % 2 == 0 ? DType::kF32 : DType::kF16;
    const int64_t c = cols(rng);
    const std::vector<int64_t> dims = i % 3 == 0 ? std::vector<int64_t>{batch(rng), rows(rng), c}
                                                 : std::vector<int64_t>{rows(rng), c};
    LayerNormBackward ln = MakeLayerNormBackward(dims, t);
    FusionPlan plan = CompileAndCheck(ln.g, base + static_cast<uint64_t>(i));
    stitched += ColumnStitchPhase(plan) != nullptr ? 1 : 0;
  }
  std::printf("%d of 6 became one kernel with column reduces\n", stitched);
}

// x[64, 32] with its sum over each row and over each column.
struct RowAndColumnSums {
  static constexpr int64_t kRows = 64, kCols = 32;
  Graph g;
  int x = -1, zero = -1, row_sum = -1, col_sum = -1;
};

RowAndColumnSums MakeSums(std::string name) {
  RowAndColumnSums s;
  s.g.name = std::move(name);
  s.x = Param(s.g, {DType::kF32, {s.kRows, s.kCols}}, 0, "x");
  s.zero = ConstScalar(s.g, DType::kF32, 0);
  s.row_sum = Reduce(s.g, s.x, s.zero, {1}, ReduceKind::kSum);
  s.col_sum = Reduce(s.g, s.x, s.zero, {0}, ReduceKind::kSum);
  return s;
}

// A row-stitched spec around the row sum that evaluates `nodes`, reads x and writes
// `outputs`.
KernelSpec RowStitchOf(const RowAndColumnSums& s, std::vector<int> nodes,
                       std::vector<int> outputs) {
  KernelSpec k;
  k.kind = KernelKind::kRowStitch;
  k.hero = s.row_sum;
  k.nodes = std::move(nodes);
  k.inputs = {s.x};
  k.outputs = std::move(outputs);
  return k;
}

// What the analysis refuses: a column reduce's result is known only after the grid
// combines the blocks' partials, so nothing in the row passes may read it, and column
// outputs read it at their own column only.
TEST(ColumnStitch, AnalysisRefusesColumnResultsReadInsideTheRows) {
  RowAndColumnSums s = MakeSums("column_then_rows");
  Graph& g = s.g;
  const std::vector<int64_t> dims = {s.kRows, s.kCols};
  int y = Binary(g, OpCode::kSub, Binary(g, OpCode::kSub, s.x, Broadcast(g, s.row_sum, dims, {0})),
                 Broadcast(g, s.col_sum, dims, {1}));
  g.outputs = {y};
  ASSERT_TRUE(Verify(g).ok());
  std::vector<int> body;
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    if (id != s.x) body.push_back(id);
  }
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, RowStitchOf(s, body, {y}));
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(layout.status().message().find("column reduce"), std::string::npos)
      << layout.status().ToString();
  // The planner finds another plan, and it is correct.
  CompileAndCheck(g, 24);
}

TEST(ColumnStitch, AnalysisRefusesAColumnResultReadThroughAReshape) {
  RowAndColumnSums s = MakeSums("column_reshaped");
  Graph& g = s.g;
  int reshaped = testing::Reshape(g, s.col_sum, {1, s.kCols});
  g.outputs = {s.row_sum, reshaped};
  ASSERT_TRUE(Verify(g).ok());
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(
      g, RowStitchOf(s, {s.zero, s.row_sum, s.col_sum, reshaped}, {s.row_sum, reshaped}));
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.status().message().find("column reduce"), std::string::npos)
      << layout.status().ToString();
  // Without the reshape the same kernel is legal, with one column output.
  KernelSpec legal = RowStitchOf(s, {s.zero, s.row_sum, s.col_sum}, {s.row_sum, s.col_sum});
  layout = AnalyzeRowStitch(g, legal);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->column_outputs, std::vector<int>{s.col_sum});
  // Alone it cannot be scheduled: the partials need a global_stitch kernel's workspace and
  // grid barrier.
  Status status = ScheduleKernel(g, legal, H100());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("global_stitch"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace stitch
