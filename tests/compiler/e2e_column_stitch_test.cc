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

#include "stitch/compiler/baseline_planner.h"
#include "stitch/compiler/compile.h"
#include "stitch/compiler/emulated_run.h"
#include "stitch/compiler/gpu_device.h"
#include "stitch/compiler/interpreter.h"
#include "stitch/compiler/row_stitch.h"
#include "stitch/compiler/schedule.h"
#include "stitch/compiler/stitch_planner.h"
#include "stitch/compiler/tensor_compare.h"
#include "stitch/compiler/verifier.h"
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

CompileOptions EmulatedCompileOptions() {
  CompileOptions o;
  o.emit_ptx = false;
  o.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  return o;
}

// Compiles `g` for the emulator, runs it in random order from `seed` and compares every
// output with the interpreter. Returns the compiled plan.
FusionPlan CompileAndCheck(const Graph& g, uint64_t seed) {
  std::printf("graph %s %s, seed %llu\n", g.name.c_str(), g.nodes[0].shape.ToString().c_str(),
              static_cast<unsigned long long>(seed));
  EXPECT_TRUE(Verify(g).ok());
  StatusOr<CompileResult> compiled = CompileGraph(g, EmulatedCompileOptions());
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  if (!compiled.ok()) return {};
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> expected = Evaluate(g, inputs);
  EXPECT_TRUE(expected.ok()) << expected.status().ToString();
  EmulatorOptions eo;
  eo.random_order = true;
  eo.seed = seed;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
  EXPECT_TRUE(emulator.ok());
  if (!expected.ok() || !emulator.ok()) return compiled->plan;
  StatusOr<EmulatedRun> run = RunOnEmulator(g, compiled->kernels, inputs, **emulator);
  EXPECT_TRUE(run.ok()) << run.status().ToString() << "\n" << Describe(g, compiled->plan);
  if (!run.ok()) return compiled->plan;
  for (size_t k = 0; k < expected->size(); ++k) {
    // Column sums add the blocks' partials in another order than the interpreter.
    const double tol = DefaultTolerance((*expected)[k].shape.dtype) * 4;
    Comparison c = Compare((*expected)[k], run->outputs[k], tol);
    EXPECT_TRUE(c.pass) << "output " << k << ": " << c.message << "\n"
                        << Describe(g, compiled->plan);
  }
  return compiled->plan;
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
  LayerNormBackward ln = MakeLayerNormBackward({2048, 768}, DType::kF32);
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
  const int64_t rows = 333, cols = 24;
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

// What the analysis refuses: a column reduce's result is known only after the grid
// combines the blocks' partials, so nothing in the row passes may read it, and column
// outputs read it at their own column only.
TEST(ColumnStitch, AnalysisRefusesColumnResultsReadInsideTheRows) {
  Graph g;
  g.name = "column_then_rows";
  const int64_t rows = 64, cols = 32;
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int zero = ConstScalar(g, DType::kF32, 0);
  int row_sum = Reduce(g, x, zero, {1}, ReduceKind::kSum);
  int col_sum = Reduce(g, x, zero, {0}, ReduceKind::kSum);
  int y =
      Binary(g, OpCode::kSub, Binary(g, OpCode::kSub, x, Broadcast(g, row_sum, {rows, cols}, {0})),
             Broadcast(g, col_sum, {rows, cols}, {1}));
  g.outputs = {y};
  ASSERT_TRUE(Verify(g).ok());
  KernelSpec all;
  all.kind = KernelKind::kRowStitch;
  all.hero = row_sum;
  all.outputs = {y};
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    if (id != x) all.nodes.push_back(id);
  }
  all.inputs = {x};
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, all);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(layout.status().message().find("column reduce"), std::string::npos)
      << layout.status().ToString();
  // The planner finds another plan, and it is correct.
  CompileAndCheck(g, 24);
}

TEST(ColumnStitch, AnalysisRefusesAColumnResultReadThroughAReshape) {
  Graph g;
  g.name = "column_reshaped";
  const int64_t rows = 64, cols = 32;
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int zero = ConstScalar(g, DType::kF32, 0);
  int row_sum = Reduce(g, x, zero, {1}, ReduceKind::kSum);
  int col_sum = Reduce(g, x, zero, {0}, ReduceKind::kSum);
  int reshaped = testing::Reshape(g, col_sum, {1, cols});
  g.outputs = {row_sum, reshaped};
  ASSERT_TRUE(Verify(g).ok());
  KernelSpec all;
  all.kind = KernelKind::kRowStitch;
  all.hero = row_sum;
  all.outputs = {row_sum, reshaped};
  all.nodes = {zero, row_sum, col_sum, reshaped};
  all.inputs = {x};
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, all);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.status().message().find("column reduce"), std::string::npos)
      << layout.status().ToString();
  // Without the reshape the same kernel is legal, with one column output.
  all.outputs = {row_sum, col_sum};
  all.nodes = {zero, row_sum, col_sum};
  layout = AnalyzeRowStitch(g, all);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->column_outputs, std::vector<int>{col_sum});
  // Alone it cannot be scheduled: the partials need a global_stitch kernel's workspace and
  // grid barrier.
  Status s = ScheduleKernel(g, all, H100());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("global_stitch"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace stitch
