// Rows too long for registers whose kept values fit a block's shared memory (ThreadMapping::
// dynamic_shared_bytes): a block per row stores what its first pass loads into dynamic shared
// memory, each thread at its own columns, and the later passes read it back from there
// instead of from DRAM. Suite row #12's 50,304-element f32 softmax rows take 201 KB, which
// an H100's 227 KB per block holds and an A100's 163 KB does not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/plan/schedule.h"
#include "stitch/plan/target.h"
#include "support/emulator_check.h"
#include "support/emulator_compare.h"
#include "support/graph_builder.h"
#include "support/normalization_graphs.h"
#include "support/ptx_text.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::CompileToPtx;
using testing::ConstScalar;
using testing::CountOf;
using testing::LayerNorm;
using testing::Param;
using testing::Reduce;
using testing::Softmax;

const GpuDevice& H100() { return *FindDevice("H100"); }

const KernelSpec& OnlyKernel(const CompileResult& r) {
  EXPECT_EQ(r.plan.kernels.size(), 1u) << Describe(r.graph, r.plan);
  return r.plan.kernels.at(0);
}

// out = x * y + sum(x * y) - x: x and y are each read by the sum's pass and by the output
// pass, so both are kept, live at once.
Graph TwoKeptInputs(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "two_kept_inputs";
  const std::vector<int64_t> dims = {rows, cols};
  int x = Param(g, {DType::kF32, dims}, 0, "x");
  int y = Param(g, {DType::kF32, dims}, 1, "y");
  int xy = Binary(g, OpCode::kMul, x, y);
  int sum = Reduce(g, xy, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum);
  int shifted =
      Binary(g, OpCode::kAdd, Binary(g, OpCode::kMul, x, y), Broadcast(g, sum, dims, {0}));
  g.outputs = {Binary(g, OpCode::kSub, shifted, x)};
  return g;
}

// Softmax over rows of `cols` elements of `t`, times `cols`: outputs near 1, so that the
// dtype's tolerance, scaled by the outputs' magnitude, sees a wrong element; softmax's own
// are near 1 / cols. exp(x - max) is kept from the sum's pass, in x's region.
Graph ScaledSoftmax(int64_t rows, int64_t cols, DType t) {
  Graph g;
  g.name = "scaled_softmax";
  const std::vector<int64_t> dims = {rows, cols};
  int x = Param(g, {t, dims}, 0, "x");
  int xf = t == DType::kF32 ? x : testing::Convert(g, x, DType::kF32);
  int mx = Reduce(g, xf, ConstScalar(g, DType::kF32, -1e30), {1}, ReduceKind::kMax);
  int e = testing::Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, xf, Broadcast(g, mx, dims, {0})));
  int sum = Reduce(g, e, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum);
  int scale =
      Binary(g, OpCode::kDiv,
             Broadcast(g, ConstScalar(g, DType::kF32, static_cast<double>(cols)), {rows}, {}), sum);
  int out = Binary(g, OpCode::kMul, e, Broadcast(g, scale, dims, {0}));
  g.outputs = {t == DType::kF32 ? out : testing::Convert(g, out, t)};
  return g;
}

// #12's softmax: x is kept from the max's pass, exp(x - max) from the sum's, which last
// reads x, so exp(x - max) takes x's region and the row takes 50,304 x 4 bytes. Each thread
// loads 4 vectors at once (16 registers, not its 52 positions'), and the PTX moves the row
// with 16-byte accesses both ways: one global load and store per vector, a shared store per
// vector in the two passes that keep a value, a shared load per vector in the two that read
// one back.
TEST(SharedRow, ASoftmaxRowTooLongForRegistersIsKeptInSharedMemory) {
  const int64_t cols = 50304;
  CompileResult r = CompileToPtx(Softmax(64, cols));
  const KernelSpec& k = OnlyKernel(r);
  const ThreadMapping& m = k.mapping;
  ASSERT_EQ(m.dynamic_shared_bytes, static_cast<uint32_t>(cols * 4)) << Describe(r.graph, r.plan);
  EXPECT_EQ(m.launch.block_threads(), 1024u);
  EXPECT_EQ(m.vector_width, 4);
  EXPECT_EQ(m.values_per_thread, 52);  // 13 vectors of 4, the last one for 288 threads
  EXPECT_EQ(m.loads_per_step, 4);
  EXPECT_EQ(m.reread_bytes_per_item, 0);
  EXPECT_FALSE(m.rescaled_sums_in_one_pass);
  EXPECT_EQ(ResidentBlocksPerSm(H100(), m), 1);
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(r.graph, k);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->kept.size(), 2u);
  EXPECT_EQ(layout->kept_first_pass, (std::vector<int>{0, 1}));
  EXPECT_EQ(layout->kept_last_pass, (std::vector<int>{1, 2}));
  const SharedRowRegions regions = SharedRowRegionsOf(r.graph, *layout);
  EXPECT_EQ(regions.offsets, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(regions.bytes, cols * 4);

  ASSERT_EQ(r.kernels.size(), 1u);
  const CompiledKernel& kernel = r.kernels[0];
  EXPECT_EQ(kernel.dynamic_shared_bytes, m.dynamic_shared_bytes);
  const std::string& ptx = kernel.ptx;
  EXPECT_NE(ptx.find(".extern .shared .align 16 .b8 stitch_dynamic_shared[]"), std::string::npos)
      << ptx;
  const int vectors = m.values_per_thread / m.vector_width;
  EXPECT_EQ(CountOf(ptx, "ld.global.nc.v4.f32"), vectors) << ptx;
  EXPECT_EQ(CountOf(ptx, "st.global.v4.f32"), vectors) << ptx;
  EXPECT_EQ(CountOf(ptx, "st.shared.v4.f32"), 2 * vectors) << ptx;
  EXPECT_EQ(CountOf(ptx, "ld.shared.v4.f32"), 2 * vectors) << ptx;
  EXPECT_EQ(ptx.find(".local"), std::string::npos) << ptx;
  // The model moves the row across DRAM once: the plan's traffic is the lower bound.
  const std::unique_ptr<CostModel> model = NewAnalyticalCostModel(H100());
  EXPECT_EQ(model->Estimate(r.graph, r.plan).per_kernel[0].dram_bytes,
            TrafficLowerBound(r.graph).total());
}

// The assembled kernel keeps within the 64 registers a 1,024-thread block leaves a thread,
// with no local memory, where the toolkit can assemble it.
TEST(SharedRow, TheKernelAssemblesWithoutSpills) {
  CompileOptions o;
  o.codegen.target = *Target::Parse("sm_90");
  StatusOr<CompileResult> r = CompileGraph(Softmax(64, 50304), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const CompiledKernel& kernel = r->kernels.at(0);
  if (kernel.cubin.empty()) GTEST_SKIP() << "no CUDA toolkit to assemble the kernel";
  ASSERT_GT(r->plan.kernels[0].mapping.dynamic_shared_bytes, 0u);
  ASSERT_TRUE(kernel.assembly.reported);
  EXPECT_LE(kernel.assembly.registers, 64);
  EXPECT_EQ(kernel.assembly.stack_bytes, 0);
  EXPECT_EQ(kernel.assembly.spill_store_bytes, 0);
  EXPECT_EQ(kernel.assembly.spill_load_bytes, 0);
}

// Values live at once take regions of their own; both rows then have to fit.
TEST(SharedRow, ValuesLiveAtOnceTakeRegionsOfTheirOwn) {
  const int64_t cols = 20000;  // 80 KB a value: two fit, in 160 KB
  CompileResult r = CompileToPtx(TwoKeptInputs(1024, cols));
  const KernelSpec& k = OnlyKernel(r);
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(r.graph, k);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->kept.size(), 2u) << Describe(r.graph, r.plan);
  const SharedRowRegions regions = SharedRowRegionsOf(r.graph, *layout);
  EXPECT_EQ(regions.offsets, (std::vector<int64_t>{0, cols * 4}));
  EXPECT_EQ(regions.bytes, 2 * cols * 4);
  // Two values of 20 positions each at 1,024 threads take more than the 64 registers such a
  // block leaves a thread, and 40 each at 512 more than a thread keeps in registers.
  EXPECT_EQ(k.mapping.dynamic_shared_bytes, static_cast<uint32_t>(regions.bytes))
      << Describe(r.graph, r.plan);
  // Rows of 30,000 take 240 KB twice, more than a block's shared memory: loop mode.
  CompileResult longer = CompileToPtx(TwoKeptInputs(1024, 30000));
  EXPECT_EQ(OnlyKernel(longer).mapping.values_per_thread, 0) << Describe(longer.graph, longer.plan);
  EXPECT_EQ(OnlyKernel(longer).mapping.dynamic_shared_bytes, 0u);
}

// A device whose blocks hold less shared memory keeps the row in loop mode.
TEST(SharedRow, AnA100KeepsTheRowInLoopMode) {
  CompileOptions o;
  o.codegen.target = *Target::Parse("sm_80");
  o.codegen.emit_cubin = false;
  StatusOr<CompileResult> r = CompileGraph(Softmax(64, 50304), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ThreadMapping& m = OnlyKernel(*r).mapping;
  EXPECT_EQ(m.dynamic_shared_bytes, 0u) << Describe(r->graph, r->plan);
  EXPECT_EQ(m.values_per_thread, 0);
  EXPECT_GT(m.reread_bytes_per_item, 0);
}

// Kernels that keep their rows in shared memory match the interpreter, threads running in
// random order between barriers and shared memory filled with 0xff between blocks: softmax
// rows (and softmax rows scaled to outputs near 1) in every dtype (f16 and bf16 rows keep f32
// values), a row length that takes 2-element vectors and leaves the last vector position to
// some threads, bias-added layer norms, and two values kept at once.
TEST(SharedRow, KernelsMatchTheInterpreter) {
  std::vector<Graph> graphs;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    graphs.push_back(Softmax(64, 50304, t));
    graphs.push_back(ScaledSoftmax(64, 50304, t));
    graphs.push_back(LayerNorm(t, {64, 40000}, 1, /*bias=*/true));
  }
  graphs.push_back(ScaledSoftmax(128, 33334, DType::kF32));  // 2-element vectors
  graphs.push_back(TwoKeptInputs(64, 20000));
  uint64_t seed = 1201;
  for (const Graph& g : graphs) {
    SCOPED_TRACE(g.name + " " + g.nodes[g.outputs[0]].shape.ToString() + " seed " +
                 std::to_string(seed));
    testing::EmulatorCheck check;
    const ::testing::AssertionResult matched =
        testing::CheckOnEmulator(g, seed++, /*random_order=*/true, &check);
    EXPECT_TRUE(matched);
    if (!matched) continue;
    ASSERT_EQ(check.compiled.plan.kernels.size(), 1u);
    EXPECT_GT(check.compiled.plan.kernels[0].mapping.dynamic_shared_bytes, 0u)
        << Describe(check.compiled.graph, check.compiled.plan);
  }
}

// The graph as one row-stitched kernel, scheduled for the H100.
KernelSpec OneRowKernel(const Graph& g) {
  KernelSpec k;
  k.name = "one_row_kernel";
  k.kind = KernelKind::kRowStitch;
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const OpCode op = g.nodes[id].op;
    if (op == OpCode::kParameter) {
      k.inputs.push_back(id);
      continue;
    }
    if (op == OpCode::kReduce && k.hero < 0) k.hero = id;
    k.nodes.push_back(id);
  }
  k.outputs = g.outputs;
  const Status scheduled = ScheduleKernel(g, k, H100());
  EXPECT_TRUE(scheduled.ok()) << scheduled.ToString();
  return k;
}

// Rows of odd length take 1-element positions. The stitching planner splits so few of them
// over several kernels, so this runs the graph as one row-stitched kernel, which keeps its
// rows in loop mode until KeepLoopRowsInSharedMemory moves them.
TEST(SharedRow, RowsOfOddLengthMatchTheInterpreter) {
  uint64_t seed = 1301;
  for (const Graph& g : {ScaledSoftmax(8, 33333, DType::kF32),
                         LayerNorm(DType::kF16, {8, 40001}, 1, /*bias=*/true)}) {
    SCOPED_TRACE(g.name + " seed " + std::to_string(seed));
    KernelSpec kernel = OneRowKernel(g);
    ASSERT_EQ(kernel.mapping.values_per_thread, 0);
    KeepLoopRowsInSharedMemory(g, kernel, H100());
    ASSERT_GT(kernel.mapping.dynamic_shared_bytes, 0u);
    EXPECT_EQ(kernel.mapping.vector_width, 1);
    StatusOr<CompiledKernel> compiled = EmitKernel(g, kernel, CodegenOptions{});
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    EXPECT_EQ(compiled->dynamic_shared_bytes, kernel.mapping.dynamic_shared_bytes);
    EXPECT_TRUE(testing::EmulatedMatchesInterpreter(g, g, {*compiled},
                                                    testing::RandomInputs(g, seed), seed,
                                                    /*random_order=*/true));
    ++seed;
  }
}

}  // namespace
}  // namespace stitch
