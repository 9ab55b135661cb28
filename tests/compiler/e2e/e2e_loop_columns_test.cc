// Loop kernels that keep each thread on its columns (ThreadMapping::column_period): where a
// kernel's elements read per-column values (a batch norm's per-channel statistics and what
// is computed from them), the grid's stride is a multiple of the columns' period, so each
// thread computes those values once, before its loop, instead of once per element. The
// planner asks for it where the issue-aware model prices it cheaper; the kernels match the
// interpreter on the emulator for a period of one trailing dimension and of several, in
// f32, f16 and bf16, and trap on a grid that breaks the period.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/codegen/ptx_summary.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/gpu_device.h"
#include "support/emulator_compare.h"
#include "support/normalization_graphs.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::Dims;
using testing::FromF32;
using testing::Param;
using testing::Splat;
using testing::ToF32;
using testing::Unary;

// A batch norm's input gradient through a swish, as suite row #19 writes it: x and dy of
// dtype `t` over `dims`, per-channel sums (f32) along `channel`. Every per-channel value
// (mean, rstd and the coefficients built from them) is computed from the sums in the kernel.
Graph BatchNormSwishGrad(DType t, Dims dims, int64_t channel) {
  Graph g;
  g.name = "batch_norm_swish_grad";
  const int64_t c = dims[static_cast<size_t>(channel)];
  const double m =
      1.0 / static_cast<double>(
                std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>()) / c);
  const int x = ToF32(g, Param(g, {t, dims}, 0, "x"));
  const int dy = ToF32(g, Param(g, {t, dims}, 1, "dy"));
  const int sum_x = Param(g, {DType::kF32, {c}}, 2, "sum_x");
  const int sum_x2 = Param(g, {DType::kF32, {c}}, 3, "sum_x2");
  const int gamma = Param(g, {DType::kF32, {c}}, 4, "gamma");
  const int sum_g = Param(g, {DType::kF32, {c}}, 5, "sum_g");
  auto per_channel = [&](int v) { return Broadcast(g, v, dims, {channel}); };
  const int mean = Binary(g, OpCode::kMul, sum_x, Splat(g, sum_x, m));
  const int var = Unary(g, OpCode::kAbs, Binary(g, OpCode::kMul, sum_x2, Splat(g, sum_x2, m)));
  const int rstd = Unary(g, OpCode::kRsqrt, Binary(g, OpCode::kAdd, var, Splat(g, var, 1e-3)));
  const int xc = Binary(g, OpCode::kSub, x, per_channel(mean));
  const int y = Binary(g, OpCode::kMul, xc, per_channel(Binary(g, OpCode::kMul, rstd, gamma)));
  const int s = Unary(g, OpCode::kLogistic, y);
  const int gs = Binary(g, OpCode::kMul, dy, s);
  const int mean_g = Binary(g, OpCode::kMul, sum_g, Splat(g, sum_g, m));
  const int dx = Binary(g, OpCode::kMul, Binary(g, OpCode::kSub, gs, per_channel(mean_g)),
                        per_channel(Binary(g, OpCode::kMul, gamma, rstd)));
  g.outputs = {FromF32(g, dx, t)};
  return g;
}

StatusOr<CompileResult> CompileForEmulator(const Graph& g) {
  CompileOptions options;
  options.emit_ptx = false;
  return CompileGraph(g, options);
}

// The smallest grid of `threads`-thread blocks, each thread taking `width` elements a pass,
// whose stride is a multiple of `period` elements.
uint32_t SmallestPeriodicGrid(int64_t period, int64_t threads, int64_t width) {
  const int64_t vectors = period / width;
  return static_cast<uint32_t>(vectors / std::gcd(vectors, threads));
}

// Runs `kernel` on the emulator in random order and compares its output with the
// interpreter's on random inputs from `seed`.
::testing::AssertionResult MatchesInterpreter(const Graph& g, const CompiledKernel& kernel,
                                              uint64_t seed) {
  return testing::EmulatedMatchesInterpreter(g, g, {kernel}, testing::RandomInputs(g, seed), seed);
}

TEST(LoopColumns, ABatchNormGradientsThreadsKeepToTheirChannels) {
  // Suite row #19's shape: 672 channels last, 67 M elements.
  const Dims dims = {512, 14, 14, 672};
  Graph g = BatchNormSwishGrad(DType::kF16, dims, 3);
  ASSERT_TRUE(Verify(g).ok());
  CompileOptions options;
  options.codegen.emit_cubin = false;
  StatusOr<CompileResult> r = CompileGraph(g, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->plan.kernels.size(), 1u) << Describe(r->graph, r->plan);
  const KernelSpec& k = r->plan.kernels[0];
  const ThreadMapping& m = k.mapping;
  ASSERT_EQ(k.kind, KernelKind::kLoop);
  EXPECT_EQ(m.column_period, 672) << Describe(r->graph, r->plan);
  const int64_t stride = static_cast<int64_t>(m.launch.blocks() * m.launch.block_threads()) *
                         std::max(m.vector_width, 1);
  EXPECT_EQ(stride % 672, 0);
  EXPECT_GE(g.nodes[g.outputs[0]].shape.elements() / stride, 2) << "passes per thread";

  // The per-channel loads and math left the loop: its body is a fraction of what the same
  // kernel runs per pass when every thread takes one vector.
  KernelSpec plain = k;
  plain.mapping.column_period = 0;
  const int64_t vectors = g.nodes[g.outputs[0]].shape.elements() / plain.mapping.vector_width;
  plain.mapping.launch.grid[0] =
      static_cast<uint32_t>(vectors / plain.mapping.launch.block_threads());
  CodegenOptions codegen;
  codegen.emit_cubin = false;
  StatusOr<CompiledKernel> one_vector = EmitKernel(r->graph, plain, codegen);
  ASSERT_TRUE(one_vector.ok()) << one_vector.status().ToString();
  ASSERT_TRUE(LowerToPtx(*one_vector, codegen).ok());
  const PtxMemorySummary kept = SummarizePtx(r->kernels[0].ptx);
  const PtxMemorySummary straight = SummarizePtx(one_vector->ptx);
  std::printf("instructions: %d in the kept kernel's loop of %d, %d in the one-vector kernel\n",
              kept.innermost_loop_instructions, kept.instructions, straight.instructions);
  EXPECT_GT(kept.innermost_loop_instructions, 0);
  EXPECT_LT(kept.innermost_loop_instructions * 10, straight.instructions * 8);

  // The models of Triton's and XLA's kernels compute per-channel values per element.
  for (BaselineCompiler b : {BaselineCompiler::kInductor, BaselineCompiler::kXla}) {
    StatusOr<BaselinePlan> baseline = PlanBaselineModel(b, g, *FindDevice("H100"), {});
    ASSERT_TRUE(baseline.ok()) << baseline.status().ToString();
    for (const KernelSpec& bk : baseline->plan.kernels) EXPECT_EQ(bk.mapping.column_period, 0);
  }
}

struct Case {
  DType dtype;
  Dims dims;
  int64_t channel;
};

const Case kCases[] = {
    // One trailing dimension (channels last), a last pass that is partial.
    {DType::kF32, {6, 5, 7, 24}, 3},
    {DType::kF16, {6, 5, 7, 24}, 3},
    {DType::kBF16, {6, 5, 7, 24}, 3},
    // Channels first: the period spans [C, H, W].
    {DType::kF32, {8, 6, 5, 8}, 1},
    {DType::kF16, {8, 6, 5, 8}, 1},
    {DType::kBF16, {8, 6, 5, 8}, 1},
};

std::string Name(const Case& c) {
  std::string dims;
  for (int64_t d : c.dims) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  return std::string(DTypeName(c.dtype)) + "[" + dims + "] channel " + std::to_string(c.channel);
}

// The kernel of `c`'s graph with its columns kept on the smallest grid (and on twice that,
// blocks of 32 and 64 threads, vectors of 1, 2 and 4, one or two vectors a step: a step's
// second vector is past the end on some threads' last step).
TEST(LoopColumns, KeptColumnsMatchTheInterpreter) {
  uint64_t seed = 7600;
  for (const Case& c : kCases) {
    Graph g = BatchNormSwishGrad(c.dtype, c.dims, c.channel);
    ASSERT_TRUE(Verify(g).ok());
    StatusOr<CompileResult> r = CompileForEmulator(g);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->plan.kernels.size(), 1u) << Describe(r->graph, r->plan);
    ASSERT_EQ(r->plan.kernels[0].kind, KernelKind::kLoop);
    int64_t period = 1;
    for (size_t d = static_cast<size_t>(c.channel); d < c.dims.size(); ++d) period *= c.dims[d];
    const int64_t n = g.nodes[g.outputs[0]].shape.elements();
    for (int threads : {32, 64}) {
      for (int width : {1, 2, 4}) {
        for (uint32_t grids : {1u, 2u}) {
          for (int per_step : {1, 2}) {
            KernelSpec k = r->plan.kernels[0];
            ThreadMapping& m = k.mapping;
            m.vector_width = width;
            m.column_period = period;
            m.loads_per_step = per_step;
            m.launch.block = {static_cast<uint32_t>(threads), 1, 1};
            m.launch.grid = {grids * SmallestPeriodicGrid(period, threads, width), 1, 1};
            if (static_cast<int64_t>(m.launch.blocks()) * threads * width >= n) continue;
            SCOPED_TRACE(Name(c) + ", " + std::to_string(threads) + " threads, width " +
                         std::to_string(width) + ", grid " + std::to_string(m.launch.grid[0]) +
                         ", " + std::to_string(per_step) + " vectors a step");
            std::printf("%s, %d threads, width %d, grid %u, %d vectors a step, seed %llu\n",
                        Name(c).c_str(), threads, width, m.launch.grid[0], per_step,
                        static_cast<unsigned long long>(seed));
            StatusOr<CompiledKernel> kernel = EmitKernel(r->graph, k, CodegenOptions{});
            ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
            EXPECT_TRUE(MatchesInterpreter(r->graph, *kernel, seed++));
          }
        }
      }
    }
  }
}

TEST(LoopColumns, AGridThatBreaksThePeriodTraps) {
  Graph g = BatchNormSwishGrad(DType::kF32, {6, 5, 7, 24}, 3);
  StatusOr<CompileResult> r = CompileForEmulator(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  KernelSpec k = r->plan.kernels[0];
  k.mapping.vector_width = 4;
  k.mapping.column_period = 24;
  k.mapping.launch.block = {32, 1, 1};
  k.mapping.launch.grid = {SmallestPeriodicGrid(24, 32, 4), 1, 1};
  StatusOr<CompiledKernel> kernel = EmitKernel(r->graph, k, CodegenOptions{});
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  ASSERT_TRUE(MatchesInterpreter(r->graph, *kernel, 7700));
  CompiledKernel off = *kernel;
  off.launch.grid[0] += 1;
  ::testing::AssertionResult run = MatchesInterpreter(r->graph, off, 7700);
  ASSERT_FALSE(run);
  EXPECT_NE(std::string(run.message()).find("trap"), std::string::npos) << run.message();
}

TEST(LoopColumns, APeriodThatIsNoTrailingDimensionsIsRefused) {
  Graph g = BatchNormSwishGrad(DType::kF32, {6, 5, 7, 24}, 3);
  StatusOr<CompileResult> r = CompileForEmulator(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int64_t period : {int64_t{25}, int64_t{6 * 5 * 7 * 24}, int64_t{7 * 24 * 3}}) {
    KernelSpec k = r->plan.kernels[0];
    k.mapping.vector_width = 1;
    k.mapping.column_period = period;
    StatusOr<CompiledKernel> kernel = EmitKernel(r->graph, k, CodegenOptions{});
    ASSERT_FALSE(kernel.ok()) << period;
    EXPECT_EQ(kernel.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(kernel.status().message().find("column period"), std::string::npos)
        << kernel.status().ToString();
  }
}

}  // namespace
}  // namespace stitch
