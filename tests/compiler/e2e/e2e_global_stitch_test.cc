// The global stitching scheme end to end: batch-norm and bias-gradient subgraphs become one
// persistent kernel whose phases meet at grid barriers and whose reductions are split over
// blocks, and every such kernel matches the interpreter on the emulator in random thread
// order. Column reductions of their own split over blocks without a grid barrier: the last
// block of each column tile combines its partials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulator.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/reference/tensor.h"
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

// A column reduction over axis 0 of x[rows, cols]: the sum, and where `with_max` also the max.
Graph ColumnReduction(int64_t rows, int64_t cols, DType t, bool with_max) {
  Graph g;
  g.name = "column_reduction";
  int x = Convert(g, Param(g, {t, {rows, cols}}, 0, "x"), DType::kF32);
  g.outputs = {Reduce(g, x, ConstScalar(g, DType::kF32, 0), {0}, ReduceKind::kSum)};
  if (with_max) {
    g.outputs.push_back(
        Reduce(g, x, ConstScalar(g, DType::kF32, -INFINITY), {0}, ReduceKind::kMax));
  }
  return g;
}

bool SplitWithLastBlock(const KernelSpec& k) {
  return k.kind == KernelKind::kColumnReduce && k.mapping.reduce_chunks > 1 &&
         k.mapping.split_combine == ThreadMapping::SplitCombine::kLastBlock;
}

// Suite row #26's shape: 768 columns make too few tiles for the GPU, so each tile's rows are
// split over blocks. Without a grid barrier the kernel launches normally (not cooperatively),
// the grid is not bounded by co-residency, and the PTX has the arrival: a fence, one atomic
// add per block and a block-wide OR that hands the answer to every thread.
TEST(SplitReductions, ABiasGradientSplitsItsColumnsOverBlocksWithoutAGridBarrier) {
  Graph g = ColumnReduction(8192, 768, DType::kF32, false);
  CompileOptions o;
  o.codegen.emit_cubin = false;
  StatusOr<CompileResult> r = CompileGraph(g, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->plan.kernels.size(), 1u) << Describe(g, r->plan);
  const KernelSpec& k = r->plan.kernels[0];
  ASSERT_TRUE(SplitWithLastBlock(k)) << Describe(g, r->plan);
  EXPECT_EQ(k.mapping.grid_barriers, 0);
  const CompiledKernel& kernel = r->kernels[0];
  EXPECT_FALSE(kernel.cooperative);
  EXPECT_GT(kernel.workspace_bytes, 0u);
  EXPECT_EQ(kernel.ptx.find(".minnctapersm"), std::string::npos);
  for (const char* needle : {"membar.gl", "atom.global.add.u32", "bar.red.or.pred"}) {
    EXPECT_NE(kernel.ptx.find(needle), std::string::npos) << needle << "\n" << kernel.ptx;
  }
  // The baselines keep their compilers' two kernels.
  for (PlannerKind baseline : {PlannerKind::kXla, PlannerKind::kInductor}) {
    o.planner = baseline;
    StatusOr<CompileResult> b = CompileGraph(g, o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    for (const KernelSpec& bk : b->plan.kernels) EXPECT_FALSE(SplitWithLastBlock(bk));
  }
}

// Sums and maxes over random shapes and dtypes match the interpreter in random thread order,
// whichever blocks arrive last; a fixed tall shape of each dtype takes the split.
TEST(SplitReductions, RandomColumnReductionsMatchTheInterpreter) {
  const uint64_t base = std::random_device{}();
  std::printf("base seed %llu\n", static_cast<unsigned long long>(base));
  std::mt19937_64 rng(base);
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (int i = 0; i < 9; ++i) {
    std::uniform_int_distribution<int64_t> rows(200, 6000), cols(1, 300);
    const bool fixed = i < 3;
    const int64_t r = fixed ? 4096 : rows(rng), c = fixed ? 256 : cols(rng);
    Graph g = ColumnReduction(r, c, types[i % 3], i % 2 == 1);
    SCOPED_TRACE("shape " + g.nodes[0].shape.ToString());
    testing::EmulatorCheck check = CompileAndCheck(g, base + static_cast<uint64_t>(i));
    if (!fixed) continue;
    ASSERT_EQ(check.compiled.plan.kernels.size(), 1u);
    EXPECT_TRUE(SplitWithLastBlock(check.compiled.plan.kernels[0]))
        << Describe(g, check.compiled.plan);
  }
}

// The last block of each tile sets its counter back to 0, so a second launch on the same
// workspace, as a host reuses it, finds every tile's last block again.
TEST(SplitReductions, ALaunchLeavesTheArrivalCountersAtZero) {
  Graph g = ColumnReduction(4096, 256, DType::kF32, true);
  CompileOptions o;
  o.emit_ptx = false;
  StatusOr<CompileResult> r = CompileGraph(g, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->kernels.size(), 1u);
  ASSERT_TRUE(SplitWithLastBlock(r->plan.kernels[0])) << Describe(g, r->plan);
  const CompiledKernel& k = r->kernels[0];
  const Graph& cg = r->graph;
  StatusOr<std::unique_ptr<Emulator>> emu = Emulator::Create();
  ASSERT_TRUE(emu.ok()) << emu.status().ToString();
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> buffers;
  for (int node : k.param_nodes) {
    buffers.push_back(cg.nodes[node].op == OpCode::kParameter
                          ? RandomDeviceBytes(cg.nodes[node].shape, rng)
                          : std::vector<uint8_t>(cg.nodes[node].shape.bytes(), 0));
  }
  const size_t ws_bytes = static_cast<size_t>(k.workspace_bytes);
  auto* workspace = static_cast<uint8_t*>(std::aligned_alloc(256, ws_bytes));
  ASSERT_NE(workspace, nullptr);
  std::memset(workspace, 0, ws_bytes);
  std::vector<void*> args;
  for (std::vector<uint8_t>& b : buffers) args.push_back(b.data());
  args.push_back(workspace);
  // A counter per column tile, after the partial arrays, which end on a 256-byte boundary:
  // a few tiles' counters are the workspace's last 256 bytes.
  const ThreadMapping& m = r->plan.kernels[0].mapping;
  const size_t tiles = static_cast<size_t>(256 / (32 * m.vector_width));
  std::vector<std::vector<uint8_t>> first;
  for (int launch = 0; launch < 2; ++launch) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (cg.nodes[k.param_nodes[i]].op != OpCode::kParameter) {
        std::fill(buffers[i].begin(), buffers[i].end(), uint8_t{0xFF});
      }
    }
    StatusOr<LaunchStats> s = (*emu)->Launch(k, args);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::vector<uint32_t> counters(tiles);
    std::memcpy(counters.data(), workspace + ws_bytes - 256, 4 * tiles);
    for (size_t t = 0; t < tiles; ++t) EXPECT_EQ(counters[t], 0u) << "tile " << t;
    if (launch == 0) {
      first = buffers;
    } else {
      EXPECT_EQ(buffers, first);
    }
  }
  std::free(workspace);
}

}  // namespace
}  // namespace stitch
