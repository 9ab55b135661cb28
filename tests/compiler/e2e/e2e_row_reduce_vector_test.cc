// Row reductions that load vectors: a thread takes vector_width consecutive reduced elements
// at once where they are consecutive in the input's minor-most dimension. A channels-first
// batch norm's statistics (suite row #17, NCHW reduced over {0, 2, 3}) then load 16-byte
// vectors in their global kernel's first phase, split over blocks, and match the interpreter
// on the emulator in f16, bf16 and f32; kernels of their own (warp rows and block rows) do
// too when given vectors, and a vector that is not consecutive in memory is refused. Seeds
// are logged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/baseline_models.h"
#include "support/emulator_check.h"
#include "support/emulator_compare.h"
#include "support/graph_builder.h"
#include "support/ptx_text.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Convert;
using testing::CountContaining;
using testing::Param;
using testing::Reduce;
using testing::ScalarAccesses;

constexpr uint64_t kSeed = 7600;

// Batch statistics of x [n, c, h, w] over {0, 2, 3} (the mean and the mean square, shifted by
// nothing) and the normalized x: a global kernel whose first phase reduces each channel.
Graph ChannelsFirstNorm(const std::vector<int64_t>& dims, DType dtype) {
  Graph g;
  g.name = "channels_first_norm";
  const int64_t channels = dims[1];
  const double count = static_cast<double>(dims[0] * dims[2] * dims[3]);
  int x = Convert(g, Param(g, {dtype, dims}, 0, "x"), DType::kF32);
  int zero = ConstScalar(g, DType::kF32, 0);
  int inv_n = Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / count), {channels}, {});
  int mean = Binary(g, OpCode::kMul, Reduce(g, x, zero, {0, 2, 3}, ReduceKind::kSum), inv_n);
  int square =
      Binary(g, OpCode::kMul,
             Reduce(g, Binary(g, OpCode::kMul, x, x), zero, {0, 2, 3}, ReduceKind::kSum), inv_n);
  int var = Binary(g, OpCode::kSub, square, Binary(g, OpCode::kMul, mean, mean));
  int eps = Broadcast(g, ConstScalar(g, DType::kF32, 1e-5), {channels}, {});
  int rstd = testing::Unary(g, OpCode::kRsqrt, Binary(g, OpCode::kAdd, var, eps));
  int y = Binary(g, OpCode::kMul, Binary(g, OpCode::kSub, x, Broadcast(g, mean, dims, {1})),
                 Broadcast(g, rstd, dims, {1}));
  g.outputs = {Convert(g, y, dtype), mean, var};
  return g;
}

// Per-channel sums of x [n, c, h, w] weighted by a per-column weight wt [w]: each lane of a
// vector reads its own weight, through the lane's coordinates rather than its linear index.
Graph WeightedChannelSums(const std::vector<int64_t>& dims, DType dtype) {
  Graph g;
  g.name = "weighted_channel_sums";
  int x = Convert(g, Param(g, {dtype, dims}, 0, "x"), DType::kF32);
  int wt = Broadcast(g, Param(g, {DType::kF32, {dims[3]}}, 1, "wt"), dims, {3});
  int sum = Reduce(g, Binary(g, OpCode::kMul, x, wt), ConstScalar(g, DType::kF32, 0), {0, 2, 3},
                   ReduceKind::kSum);
  int mean =
      Binary(g, OpCode::kMul, sum, Broadcast(g, ConstScalar(g, DType::kF32, 1e-3), {dims[1]}, {}));
  // The normalized output puts the sums in a global kernel's first phase.
  g.outputs = {Convert(g, Binary(g, OpCode::kSub, x, Broadcast(g, mean, dims, {1})), dtype)};
  return g;
}

// Row sums of x [rows, len].
Graph RowSum(int64_t rows, int64_t len, DType dtype) {
  Graph g;
  g.name = "row_sum";
  int x = Convert(g, Param(g, {dtype, {rows, len}}, 0, "x"), DType::kF32);
  g.outputs = {Reduce(g, x, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum)};
  return g;
}

// The row-reduce phase of the one global kernel of `plan`, or nullptr.
const KernelSpec* RowReducePhase(const FusionPlan& plan) {
  if (plan.kernels.size() != 1 || plan.kernels[0].kind != KernelKind::kGlobalStitch) return nullptr;
  for (const KernelSpec& phase : plan.kernels[0].phases) {
    if (phase.kind == KernelKind::kRowReduce) return &phase;
  }
  return nullptr;
}

TEST(RowReduceVectors, ChannelsFirstStatisticsLoadSixteenBytesAndMatchTheInterpreter) {
  uint64_t seed = kSeed;
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    // Planes of 32 x 40 elements: 8-element vectors in f16 and bf16, 4 in f32; each channel's
    // 40,960 elements split over blocks.
    const Graph g = ChannelsFirstNorm({32, 3, 32, 40}, dtype);
    SCOPED_TRACE(g.nodes[g.Parameters()[0]].shape.ToString() + ", seed " + std::to_string(seed));
    const CompileResult r = testing::CompileToPtx(g, /*never_slower=*/false);
    const KernelSpec* phase = RowReducePhase(r.plan);
    ASSERT_NE(phase, nullptr) << Describe(r.graph, r.plan);
    const int element_bytes = dtype == DType::kF32 ? 4 : 2;
    EXPECT_EQ(phase->mapping.vector_width, 16 / element_bytes) << Describe(r.graph, r.plan);
    EXPECT_GT(phase->mapping.reduce_chunks, 1) << Describe(r.graph, r.plan);
    // The first phase ends where the grid first meets (its arrival's atomic add): up to
    // there, the channel's elements load in 16-byte vectors, loads_per_step of them a step
    // and, after the last full step, one a step.
    const std::string& ptx = r.kernels[0].ptx;
    const std::string first_phase = ptx.substr(0, ptx.find("atom.global"));
    const int loads = phase->mapping.loads_per_step;
    EXPECT_EQ(CountContaining(first_phase, "ld.global.nc.v4"), loads > 1 ? loads + 1 : 1) << ptx;

    testing::EmulatorCheck check;
    EXPECT_TRUE(testing::CheckOnEmulator(g, seed, /*random_order=*/true, &check,
                                         /*tolerance_scale=*/4));
    std::printf("%s %s: %d-element vectors, %d loads a step, %d chunks, max relative error %.2e\n",
                g.name.c_str(), g.nodes[g.Parameters()[0]].shape.ToString().c_str(),
                phase->mapping.vector_width, phase->mapping.loads_per_step,
                phase->mapping.reduce_chunks, check.max_rel_error);
    seed += 100;
  }
}

TEST(RowReduceVectors, AMinorDimensionTheVectorDoesNotDivideTakesNarrowerVectors) {
  // Planes of 64 x 6: 6 f16 take vectors of 2; 64 x 7: single elements.
  for (const auto& [w, width] : {std::pair{int64_t{6}, 2}, std::pair{int64_t{7}, 1}}) {
    const Graph g = ChannelsFirstNorm({6, 5, 64, w}, DType::kF16);
    const CompileResult r = testing::CompileToPtx(g, /*never_slower=*/false);
    const KernelSpec* phase = RowReducePhase(r.plan);
    ASSERT_NE(phase, nullptr) << Describe(r.graph, r.plan);
    EXPECT_EQ(phase->mapping.vector_width, width) << Describe(r.graph, r.plan);
    EXPECT_TRUE(testing::CheckOnEmulator(g, kSeed + 7 + static_cast<uint64_t>(w),
                                         /*random_order=*/true, nullptr, /*tolerance_scale=*/4));
  }
}

TEST(RowReduceVectors, EachLaneOfAVectorReadsItsOwnPerColumnWeight) {
  const Graph g = WeightedChannelSums({32, 3, 32, 40}, DType::kF16);
  const CompileResult r = testing::CompileToPtx(g, /*never_slower=*/false);
  const KernelSpec* phase = RowReducePhase(r.plan);
  ASSERT_NE(phase, nullptr) << Describe(r.graph, r.plan);
  EXPECT_EQ(phase->mapping.vector_width, 8) << Describe(r.graph, r.plan);
  EXPECT_TRUE(testing::CheckOnEmulator(g, kSeed + 30, /*random_order=*/true, nullptr,
                                       /*tolerance_scale=*/4));
}

// The one row-reduce kernel of the XLA model's plan of `g`, given vectors of `width`.
struct PlannedKernel {
  Graph graph;
  KernelSpec kernel;
};
PlannedKernel RowReduceKernelOf(const Graph& g, int width) {
  StatusOr<BaselinePlan> plan = PlanBaselineModel(BaselineCompiler::kXla, g, *FindDevice("H100"));
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok() || plan->plan.kernels.size() != 1) return {};
  KernelSpec kernel = plan->plan.kernels[0];
  EXPECT_EQ(kernel.kind, KernelKind::kRowReduce);
  // Kernels of their own keep single elements (ScheduleRowReduce).
  EXPECT_EQ(kernel.mapping.vector_width, 1);
  kernel.mapping.vector_width = width;
  return {plan->graph, kernel};
}

TEST(RowReduceVectors, WarpAndBlockRowsOfTheirOwnMatchTheInterpreterWithVectors) {
  uint64_t seed = kSeed + 50;
  // Rows of 256 (a warp a row) and of 6,144 (a block a row), in f16 and f32.
  for (const int64_t len : {int64_t{256}, int64_t{6144}}) {
    for (DType dtype : {DType::kF16, DType::kF32}) {
      const Graph g = RowSum(37, len, dtype);
      const int width = dtype == DType::kF32 ? 4 : 8;
      PlannedKernel planned = RowReduceKernelOf(g, width);
      SCOPED_TRACE(g.nodes[g.Parameters()[0]].shape.ToString() + ", seed " + std::to_string(seed));
      CodegenOptions options;
      StatusOr<CompiledKernel> compiled = EmitKernel(planned.graph, planned.kernel, options);
      ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
      CompiledKernel lowered = *compiled;
      ASSERT_TRUE(LowerToPtx(lowered, options).ok());
      // Every load of the row is a 16-byte vector.
      EXPECT_GT(CountContaining(lowered.ptx, "ld.global.nc.v4"), 0) << lowered.ptx;
      EXPECT_EQ(ScalarAccesses(lowered.ptx, "ld.global.nc"), 0) << lowered.ptx;
      EXPECT_TRUE(testing::EmulatedMatchesInterpreter(g, planned.graph, {*compiled},
                                                      testing::RandomInputs(g, seed), seed,
                                                      /*random_order=*/true));
      ++seed;
    }
  }
}

TEST(RowReduceVectors, AVectorThatIsNotConsecutiveInTheInputIsRefused) {
  // Rows of 100 f16: 8 does not divide them, so vector 1 of row 1 would straddle two rows.
  PlannedKernel planned = RowReduceKernelOf(RowSum(16, 100, DType::kF16), 8);
  StatusOr<CompiledKernel> compiled = EmitKernel(planned.graph, planned.kernel, CodegenOptions{});
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(compiled.status().message().find("vectors of 8 reduced elements"), std::string::npos)
      << compiled.status().ToString();
}

}  // namespace
}  // namespace stitch
