// The global stitching scheme end to end: batch-norm and bias-gradient subgraphs become one
// persistent kernel whose phases meet at grid barriers and whose reductions are split over
// blocks, and every such kernel matches the interpreter on the emulator in random thread
// order.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "stitch/driver/compile.h"
#include "stitch/plan/gpu_device.h"
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

// Training batch norm over `stats_dims` of x (two-pass variance), then scale, shift, ReLU.
Graph BatchNorm(std::vector<int64_t> dims, std::vector<int64_t> stats_dims, int64_t channel_dim,
                DType t) {
  Graph g;
  g.name = "batchnorm";
  const int64_t channels = dims[static_cast<size_t>(channel_dim)];
  int64_t count = 1;
  for (int64_t d : stats_dims) count *= dims[static_cast<size_t>(d)];
  int x = Param(g, {t, dims}, 0, "x");
  int gamma = Param(g, {DType::kF32, {channels}}, 1, "gamma");
  int beta = Param(g, {DType::kF32, {channels}}, 2, "beta");
  int xf = Convert(g, x, DType::kF32);
  int zero = ConstScalar(g, DType::kF32, 0);
  int inv_n =
      Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / static_cast<double>(count)), {channels}, {});
  int mean = Binary(g, OpCode::kMul, Reduce(g, xf, zero, stats_dims, ReduceKind::kSum), inv_n);
  int centered = Binary(g, OpCode::kSub, xf, Broadcast(g, mean, dims, {channel_dim}));
  int var = Binary(
      g, OpCode::kMul,
      Reduce(g, Binary(g, OpCode::kMul, centered, centered), zero, stats_dims, ReduceKind::kSum),
      inv_n);
  int eps = Broadcast(g, ConstScalar(g, DType::kF32, 1e-5), {channels}, {});
  int scale =
      Binary(g, OpCode::kMul, Unary(g, OpCode::kRsqrt, Binary(g, OpCode::kAdd, var, eps)), gamma);
  int y = Binary(g, OpCode::kAdd,
                 Binary(g, OpCode::kMul, centered, Broadcast(g, scale, dims, {channel_dim})),
                 Broadcast(g, beta, dims, {channel_dim}));
  int relu = Binary(g, OpCode::kMax, y, Broadcast(g, ConstScalar(g, DType::kF32, 0), dims, {}));
  g.outputs = {Convert(g, relu, t), mean, var};
  return g;
}

// A bias gradient beside the elementwise gradient it sums: dx = dy * tanh'(x) and
// dbias = sum of dx over every dimension but the last.
Graph BiasGrad(int64_t rows, int64_t cols, DType t) {
  Graph g;
  g.name = "bias_grad";
  int dy = Param(g, {t, {rows, cols}}, 0, "dy");
  int x = Param(g, {t, {rows, cols}}, 1, "x");
  int th = Unary(g, OpCode::kTanh, Convert(g, x, DType::kF32));
  int one = Broadcast(g, ConstScalar(g, DType::kF32, 1), {rows, cols}, {});
  int dx = Binary(g, OpCode::kMul, Convert(g, dy, DType::kF32),
                  Binary(g, OpCode::kSub, one, Binary(g, OpCode::kMul, th, th)));
  int zero = ConstScalar(g, DType::kF32, 0);
  g.outputs = {Convert(g, dx, t), Reduce(g, dx, zero, {0}, ReduceKind::kSum)};
  return g;
}

// Compiles `g`, runs it on the emulator in random order from `seed` and compares each
// output with the interpreter. Split reductions add in another order than the interpreter:
// a looser bound for f32.
testing::EmulatorCheck CompileAndCheck(const Graph& g, uint64_t seed) {
  std::printf("graph %s, seed %llu\n", g.name.c_str(), static_cast<unsigned long long>(seed));
  testing::EmulatorCheck check;
  EXPECT_TRUE(testing::CheckOnEmulator(g, seed, /*random_order=*/true, &check,
                                       /*tolerance_scale=*/4));
  return check;
}

int SplitPhases(const KernelSpec& k) {
  int split = 0;
  for (const KernelSpec& p : k.phases) split += p.mapping.reduce_chunks > 1 ? 1 : 0;
  return split;
}

TEST(GlobalStitch, ChannelsLastBatchNormIsOnePersistentKernelWithSplitColumnReductions) {
  Graph g = BatchNorm({8, 32, 32, 64}, {0, 1, 2}, 3, DType::kF16);
  testing::EmulatorCheck c = CompileAndCheck(g, 11);
  ASSERT_EQ(c.compiled.plan.kernels.size(), 1u) << Describe(g, c.compiled.plan);
  const KernelSpec& k = c.compiled.plan.kernels[0];
  EXPECT_EQ(k.kind, KernelKind::kGlobalStitch);
  EXPECT_GE(k.phases.size(), 2u);
  EXPECT_GE(SplitPhases(k), 1) << Describe(g, c.compiled.plan);
  EXPECT_LE(static_cast<int64_t>(k.mapping.launch.blocks()), kEmulatorMaxPersistentGridBlocks);
  // Phase barriers plus one per split reduction, and the workspace holds their partials.
  EXPECT_EQ(k.mapping.grid_barriers, static_cast<int>(k.phases.size()) - 1 + SplitPhases(k));
  EXPECT_GT(c.compiled.kernels[0].workspace_bytes, 256u);
  bool global_edge = false;
  for (const StitchEdge& e : k.edges) global_edge |= e.scheme == StitchScheme::kGlobal;
  EXPECT_TRUE(global_edge);
}

TEST(GlobalStitch, ChannelsFirstBatchNormSplitsItsMixedReductionsOverBlocks) {
  Graph g = BatchNorm({8, 32, 56, 56}, {0, 2, 3}, 1, DType::kF32);
  testing::EmulatorCheck c = CompileAndCheck(g, 12);
  ASSERT_EQ(c.compiled.plan.kernels.size(), 1u) << Describe(g, c.compiled.plan);
  const KernelSpec& k = c.compiled.plan.kernels[0];
  EXPECT_EQ(k.kind, KernelKind::kGlobalStitch);
  EXPECT_GE(SplitPhases(k), 1) << Describe(g, c.compiled.plan);
}

TEST(GlobalStitch, BiasGradientWritesTheElementwiseGradientWhereItIsSummed) {
  Graph g = BiasGrad(3000, 96, DType::kF16);
  testing::EmulatorCheck c = CompileAndCheck(g, 13);
  ASSERT_EQ(c.compiled.plan.kernels.size(), 1u) << Describe(g, c.compiled.plan);
  // The inputs are read once: dx is a side output of the column reduction.
  const KernelSpec& k = c.compiled.plan.kernels[0];
  const KernelSpec& reduce = k.kind == KernelKind::kGlobalStitch ? k.phases[0] : k;
  EXPECT_EQ(reduce.kind, KernelKind::kColumnReduce);
  EXPECT_EQ(reduce.outputs.size(), 2u);
}

TEST(GlobalStitch, RandomShapesMatchTheInterpreter) {
  const uint64_t base = std::random_device{}();
  std::printf("base seed %llu\n", static_cast<unsigned long long>(base));
  std::mt19937_64 rng(base);
  for (int i = 0; i < 6; ++i) {
    std::uniform_int_distribution<int64_t> small(1, 7), channels(1, 70), spatial(3, 40);
    const bool last = i % 2 == 0;
    const int64_t n = small(rng), c = channels(rng), h = spatial(rng), w = spatial(rng);
    Graph g = last ? BatchNorm({n, h, w, c}, {0, 1, 2}, 3, i % 3 == 0 ? DType::kF16 : DType::kF32)
                   : BatchNorm({n, c, h, w}, {0, 2, 3}, 1, DType::kF32);
    SCOPED_TRACE("shape " + g.nodes[0].shape.ToString());
    CompileAndCheck(g, base + static_cast<uint64_t>(i));
  }
}

TEST(GlobalStitch, PersistentGridsStayWithinTheCoResidencyBound) {
  for (const char* target : {"sm_80", "sm_90"}) {
    CompileOptions o;
    o.codegen.target = *Target::Parse(target);
    o.codegen.emit_cubin = false;
    Graph g = BatchNorm({32, 56, 56, 64}, {0, 1, 2}, 3, DType::kF16);
    StatusOr<CompileResult> r = CompileGraph(g, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const GpuDevice& device = o.codegen.target.device();
    for (size_t i = 0; i < r->plan.kernels.size(); ++i) {
      const KernelSpec& k = r->plan.kernels[i];
      if (k.kind != KernelKind::kGlobalStitch) continue;
      EXPECT_LE(static_cast<int64_t>(k.mapping.launch.blocks()),
                CoResidentBlocks(device, k.mapping))
          << target;
      // ptxas is told how many blocks per SM the grid assumed.
      EXPECT_NE(r->kernels[i].ptx.find(".minnctapersm"), std::string::npos) << target;
      EXPECT_GT(r->kernels[i].workspace_bytes, 0u);
    }
  }
}

}  // namespace
}  // namespace stitch
