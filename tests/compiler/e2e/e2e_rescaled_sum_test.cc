// Rescaled sums (row_stitch.h): a row kernel whose rows are too long for registers computes
// softmax's sum of exp(x - max) in the max's pass, each thread keeping its sum relative to
// its running max, so it reads each row twice instead of three times. The planner asks for
// it in loop mode only; every mapping that runs it matches the interpreter on the emulator
// in random thread order, on rows whose max keeps growing and on rows with -inf, +inf and
// NaN, in f32, f16 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor.h"
#include "stitch/reference/tensor_compare.h"
#include "support/emulator_compare.h"
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

constexpr double kInf = std::numeric_limits<double>::infinity();

// Softmax over the rows of x[rows, cols] of dtype `t`, with the row sums as a second output.
// `in_f32` computes in f32 (x converted first); otherwise every op is in `t`. The max starts
// from `max_init`.
Graph SoftmaxWithSums(int64_t rows, int64_t cols, DType t, bool in_f32, double max_init) {
  Graph g;
  g.name = "softmax_with_sums";
  const DType c = in_f32 ? DType::kF32 : t;
  int x = Param(g, {t, {rows, cols}}, 0, "x");
  int xc = c == t ? x : Convert(g, x, c);
  int m = Reduce(g, xc, ConstScalar(g, c, max_init), {1}, ReduceKind::kMax);
  int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, xc, Broadcast(g, m, {rows, cols}, {0})));
  int s = Reduce(g, e, ConstScalar(g, c, 0), {1}, ReduceKind::kSum);
  int y = Binary(g, OpCode::kDiv, e, Broadcast(g, s, {rows, cols}, {0}));
  g.outputs = {c == t ? y : Convert(g, y, t), s};
  return g;
}

// Rows that exercise the running max: random values, a rising ramp (the max grows at every
// group), -inf before the first finite value, all -inf, a NaN, a +inf, and values far above
// what exp takes unshifted. Rows beyond these are random.
Tensor SpecialRows(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t = RandomTensor(shape, rng);
  const int64_t cols = shape.dims[1];
  auto at = [&](int64_t row, int64_t col) -> double& { return t.f[row * cols + col]; };
  for (int64_t j = 0; j < cols; ++j) {
    at(1, j) = RoundToDType(-8.0 + 16.0 * static_cast<double>(j) / cols, shape.dtype);
    if (j < cols / 2) at(2, j) = -kInf;
    at(3, j) = -kInf;
    at(6, j) = RoundToDType(200.0 + at(6, j), shape.dtype);
  }
  at(4, cols / 3) = std::nan("");
  at(5, 2 * cols / 3) = kInf;
  return t;
}

// Runs `kernels` of `compiled` on the emulator in random order and compares both outputs with
// the interpreter on SpecialRows.
::testing::AssertionResult MatchesInterpreter(const Graph& g, const Graph& compiled,
                                              const std::vector<CompiledKernel>& kernels,
                                              uint64_t seed) {
  const int x = g.Parameters()[0];
  return testing::EmulatedMatchesInterpreter(g, compiled, kernels,
                                             {SpecialRows(g.nodes[x].shape, seed)}, seed);
}

StatusOr<CompileResult> CompileForEmulator(const Graph& g) {
  CompileOptions options;
  options.emit_ptx = false;
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  return CompileGraph(g, options);
}

// The plan's row-stitched kernel: the kernel itself, or the phase of a global kernel.
const KernelSpec* RowStitchOf(const FusionPlan& plan) {
  for (const KernelSpec& k : plan.kernels) {
    if (k.kind == KernelKind::kRowStitch) return &k;
    for (const KernelSpec& p : k.phases) {
      if (p.kind == KernelKind::kRowStitch) return &p;
    }
  }
  return nullptr;
}

const GpuDevice& H100() { return *FindDevice("H100"); }

TEST(RescaledSum, RowsInLoopModeComputeTheSumInTheMaxPassAndReadTheirRowTwice) {
  // 65,536 f32 per row: no thread keeps its share in registers, and a block's shared memory
  // does not hold the row (suite row #12's 50,304 it does: e2e_shared_row_test).
  const int64_t rows = 8192, cols = 65536;
  Graph g = testing::Softmax(rows, cols);
  ASSERT_TRUE(Verify(g).ok());
  StatusOr<CompileResult> r = CompileForEmulator(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->plan.kernels.size(), 1u) << Describe(r->graph, r->plan);
  KernelSpec k = r->plan.kernels[0];
  ASSERT_EQ(k.mapping.values_per_thread, 0);
  EXPECT_TRUE(k.mapping.rescaled_sums_in_one_pass);
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(r->graph, k);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->rescaled_sums.size(), 1u);
  EXPECT_TRUE(InOnePass(*layout, layout->rescaled_sums[0]));
  EXPECT_EQ(layout->phases.size(), 1u);
  // The output pass reads the row once more: one re-read, where two passes of reduces and
  // the output pass made two.
  EXPECT_EQ(k.mapping.reread_bytes_per_item, cols * 4);
  KernelSpec two_passes = k;
  two_passes.mapping.rescaled_sums_in_one_pass = false;
  StatusOr<RowStitchLayout> unmerged = AnalyzeRowStitch(r->graph, two_passes);
  ASSERT_TRUE(unmerged.ok());
  EXPECT_EQ(unmerged->phases.size(), 2u);
  // Where the re-reads miss L2 (a block per row, every slot in flight), the model prices
  // the one-pass form a pass cheaper per row.
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(H100(), kCurrentCostModel);
  two_passes.mapping.reread_bytes_per_item = 2 * cols * 4;
  two_passes.mapping.launch.grid[0] = static_cast<uint32_t>(rows);
  k.mapping.launch.grid[0] = static_cast<uint32_t>(rows);
  EXPECT_LT(model->EstimateKernel(r->graph, k).seconds,
            model->EstimateKernel(r->graph, two_passes).seconds);
  // Rows held in registers keep the plain passes.
  StatusOr<CompileResult> short_rows = CompileForEmulator(testing::Softmax(4096, 768));
  ASSERT_TRUE(short_rows.ok());
  EXPECT_GT(short_rows->plan.kernels[0].mapping.values_per_thread, 0);
  EXPECT_FALSE(short_rows->plan.kernels[0].mapping.rescaled_sums_in_one_pass);
}

TEST(RescaledSum, OnlySumsOfExpOfTheRowMinusItsOwnMaxAreRescaled) {
  const int64_t rows = 4, cols = 64;
  Graph g;
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int z = Param(g, {DType::kF32, {rows, cols}}, 1, "z");
  int ninf = ConstScalar(g, DType::kF32, -kInf);
  int zero = ConstScalar(g, DType::kF32, 0);
  int m = Reduce(g, x, ninf, {1}, ReduceKind::kMax);
  int mb = Broadcast(g, m, {rows, cols}, {0});
  int of_x = Reduce(g, Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, x, mb)), zero, {1},
                    ReduceKind::kSum);
  // exp(z - max(x)): z may exceed the max, so no running max bounds its terms.
  int of_z = Reduce(g, Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, z, mb)), zero, {1},
                    ReduceKind::kSum);
  // exp(max - x) grows as the max does.
  int flipped = Reduce(g, Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, mb, x)), zero, {1},
                       ReduceKind::kSum);
  g.outputs = {of_x, of_z, flipped};
  ASSERT_TRUE(Verify(g).ok());
  KernelSpec k;
  k.kind = KernelKind::kRowStitch;
  k.hero = m;
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    if (id != x && id != z) k.nodes.push_back(id);
  }
  k.inputs = {x, z};
  k.outputs = g.outputs;
  k.mapping.rescaled_sums_in_one_pass = true;
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, k);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->rescaled_sums.size(), 1u);
  EXPECT_EQ(layout->rescaled_sums[0].max_reduce, m);
  EXPECT_EQ(layout->rescaled_sums[0].sum_reduce, of_x);
  ASSERT_EQ(layout->phases.size(), 2u);
  EXPECT_EQ(layout->phases[0], (std::vector<int>{m, of_x}));
}

struct Case {
  DType dtype;
  bool in_f32;
  double max_init;
};

std::string Name(const Case& c) {
  return std::string(DTypeName(c.dtype)) + (c.in_f32 ? " via f32" : "") +
         (std::isinf(c.max_init) ? " max from -inf" : " max from -1e30");
}

const Case kCases[] = {
    {DType::kF32, true, -kInf},  {DType::kF32, true, -1e30},  {DType::kF16, true, -kInf},
    {DType::kBF16, true, -kInf}, {DType::kF16, false, -kInf}, {DType::kBF16, false, -kInf},
};

TEST(RescaledSum, ThePlannersLoopModeKernelMatchesTheInterpreter) {
  // 65,536 per row: more than 32 per thread at 1,024 threads, and 256 KiB of f32 values,
  // more than a block's shared memory, so the planner's mapping is in loop mode.
  uint64_t seed = 7300;
  for (const Case& c : kCases) {
    Graph g = SoftmaxWithSums(8, 65536, c.dtype, c.in_f32, c.max_init);
    SCOPED_TRACE(Name(c));
    std::printf("%s, seed %llu\n", Name(c).c_str(), static_cast<unsigned long long>(seed));
    ASSERT_TRUE(Verify(g).ok());
    StatusOr<CompileResult> r = CompileForEmulator(g);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const KernelSpec* rows = RowStitchOf(r->plan);
    ASSERT_NE(rows, nullptr) << Describe(r->graph, r->plan);
    EXPECT_TRUE(rows->mapping.rescaled_sums_in_one_pass) << Describe(r->graph, r->plan);
    EXPECT_TRUE(MatchesInterpreter(g, r->graph, r->kernels, seed++));
  }
}

// The same kernel emitted for other loop-mode mappings: several rows per warp, a warp per
// row and a block per row, with and without vectors, on a grid smaller than the rows.
TEST(RescaledSum, EveryLoopModeMappingMatchesTheInterpreter) {
  struct Mapping {
    int threads_per_row;
    bool vectors;
  };
  const Mapping mappings[] = {{8, false}, {8, true}, {32, true}, {128, false}, {256, true}};
  uint64_t seed = 7400;
  for (const Case& c : kCases) {
    Graph g = SoftmaxWithSums(8, 1024, c.dtype, c.in_f32, c.max_init);
    ASSERT_TRUE(Verify(g).ok());
    StatusOr<CompileResult> r = CompileForEmulator(g);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->plan.kernels.size(), 1u) << Describe(r->graph, r->plan);
    ASSERT_EQ(r->plan.kernels[0].kind, KernelKind::kRowStitch) << Describe(r->graph, r->plan);
    for (const Mapping& mapping : mappings) {
      KernelSpec k = r->plan.kernels[0];
      ThreadMapping& m = k.mapping;
      m.threads_per_row = mapping.threads_per_row;
      m.values_per_thread = 0;
      m.rescaled_sums_in_one_pass = true;
      if (!mapping.vectors) m.vector_width = 1;
      if (mapping.threads_per_row <= 32) {
        m.launch.block = {32, 2, 1};
        m.rows_per_block = 2 * 32 / mapping.threads_per_row;
      } else {
        m.launch.block = {static_cast<uint32_t>(mapping.threads_per_row), 1, 1};
        m.rows_per_block = 1;
      }
      m.launch.grid = {2, 1, 1};
      SCOPED_TRACE(Name(c) + ", " + std::to_string(mapping.threads_per_row) +
                   " threads per row, vector width " + std::to_string(m.vector_width));
      std::printf("%s, %d threads per row, width %d, seed %llu\n", Name(c).c_str(),
                  mapping.threads_per_row, m.vector_width, static_cast<unsigned long long>(seed));
      StatusOr<CompiledKernel> kernel = EmitKernel(r->graph, k, CodegenOptions{});
      ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
      EXPECT_TRUE(MatchesInterpreter(g, r->graph, {*kernel}, seed++));
    }
  }
}

TEST(RescaledSum, RowsInRegistersAreRefusedTheOnePassForm) {
  Graph g = testing::Softmax(64, 256);
  StatusOr<CompileResult> r = CompileForEmulator(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  KernelSpec k = r->plan.kernels[0];
  ASSERT_GT(k.mapping.values_per_thread, 0);
  k.mapping.rescaled_sums_in_one_pass = true;
  StatusOr<CompiledKernel> kernel = EmitKernel(r->graph, k, CodegenOptions{});
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kernel.status().message().find("loop mode"), std::string::npos)
      << kernel.status().ToString();
}

}  // namespace
}  // namespace stitch
