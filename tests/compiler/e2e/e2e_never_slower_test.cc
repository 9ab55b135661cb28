// Never slower: where the stitched plan is modelled slower than a baseline model's, the
// compiler ships that baseline's plan, records the choice, and the shipped kernels compute
// what the graph does.
#include <gtest/gtest.h>

#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using namespace stitch::testing;

// A row sum of |x| and the log of each sum: XLA's warp-per-row reduction, the log computed
// where each row's sum is written (its reduction epilogue fusion), is modelled faster than the
// row-stitched kernel the stitching planner makes.
Graph RowSumLog(int64_t rows, int64_t cols) {
  Graph g;
  const int x = Param(g, {DType::kF32, {rows, cols}}, 0);
  const int sum =
      Reduce(g, Unary(g, OpCode::kAbs, x), ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum);
  Output(g, Unary(g, OpCode::kLog, sum));
  return g;
}

TEST(NeverSlower, ABaselineModelledFasterShipsInsteadAndTheBundleSaysSo) {
  const Graph g = RowSumLog(131072, 1024);
  CompileOptions options;
  options.emit_ptx = false;
  StatusOr<CompileResult> r = CompileGraph(g, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->baselines.size(), 2u);
  // The stitched plan loses here, so the better baseline ships and nothing slower does.
  EXPECT_GT(r->stitched_cost.seconds, r->baseline_cost.seconds) << Describe(g, r->plan);
  EXPECT_NE(r->shipped, PlannerKind::kStitch);
  EXPECT_EQ(r->plan.planner, PlannerKindName(r->shipped));
  EXPECT_DOUBLE_EQ(r->cost.seconds, r->baseline_cost.seconds);
  for (const BaselineEstimate& b : r->baselines) EXPECT_GE(b.cost.seconds, r->cost.seconds);
  // The baseline's graph keeps the parameters and outputs its kernels are bound to.
  EXPECT_EQ(r->graph.Parameters().size(), g.Parameters().size());
  EXPECT_EQ(r->graph.outputs.size(), g.outputs.size());

  const v1::KernelBundle bundle = ToBundle(*r, options);
  EXPECT_EQ(bundle.cost().shipped(), std::string(PlannerKindName(r->shipped)));
  // The stitched plan, both compiler models, and the eager model (priced, never shipped).
  ASSERT_EQ(bundle.cost().plans_size(), 4);
  EXPECT_EQ(bundle.cost().plans(0).planner(), "stitch");
  EXPECT_EQ(bundle.cost().plans(3).planner(), "eager");
  ASSERT_TRUE(r->eager_cost.has_value());
  EXPECT_GE(r->eager_cost->seconds, r->cost.seconds);
  EXPECT_DOUBLE_EQ(bundle.cost().plans(0).seconds(), r->stitched_cost.seconds);
  EXPECT_DOUBLE_EQ(bundle.cost().stitched_seconds(), r->cost.seconds);
  EXPECT_EQ(bundle.kernels_size(), static_cast<int>(r->plan.kernels.size()));

  // Asked to ship the stitched plan regardless, the compiler does, under another key.
  CompileOptions always = options;
  always.never_slower = false;
  StatusOr<CompileResult> stitched = CompileGraph(g, always);
  ASSERT_TRUE(stitched.ok()) << stitched.status().ToString();
  EXPECT_EQ(stitched->shipped, PlannerKind::kStitch);
  EXPECT_DOUBLE_EQ(stitched->cost.seconds, stitched->stitched_cost.seconds);
  EXPECT_NE(stitched->key.hex, r->key.hex);
}

TEST(NeverSlower, TheBaselinePlanThatShipsMatchesTheInterpreterOnTheEmulator) {
  // At the emulator's budget the stitched plan wins, so the XLA model's plan, the one that
  // ships at full size, is asked for by name and runs through the same path.
  const Graph g = RowSumLog(1024, 1024);
  EmulatorCheck check;
  ASSERT_TRUE(CheckOnEmulator(g, 7, /*random_order=*/true, &check, 1.0, /*never_slower=*/false,
                              PlannerKind::kXla));
  EXPECT_EQ(check.compiled.shipped, PlannerKind::kXla);
  EXPECT_EQ(check.compiled.plan.planner, "xla");
}

// The baseline models keep an epilogue in its reduction's kernel, as XLA and Inductor do: a
// bias gradient over 8,192 rows, cast to f16, is two kernels in both (XLA's tree split and
// Inductor's split reduction), the second stage casting what it writes, where the cast once
// had a kernel of its own. The reduce itself is not written; the kernels match the
// interpreter on the emulator.
TEST(NeverSlower, BaselineModelsComputeAReductionsEpilogueInItsKernel) {
  Graph g;
  const int dy = Param(g, {DType::kF16, {8192, 96}}, 0);
  const int sum =
      Reduce(g, Convert(g, dy, DType::kF32), ConstScalar(g, DType::kF32, 0), {0}, ReduceKind::kSum);
  Output(g, Convert(g, sum, DType::kF16));
  for (PlannerKind planner : {PlannerKind::kXla, PlannerKind::kInductor}) {
    SCOPED_TRACE(std::string(PlannerKindName(planner)));
    EmulatorCheck check;
    ASSERT_TRUE(CheckOnEmulator(g, 11, /*random_order=*/true, &check, 1.0,
                                /*never_slower=*/false, planner));
    const FusionPlan& plan = check.compiled.plan;
    ASSERT_EQ(plan.kernels.size(), 2u) << Describe(check.compiled.graph, plan);
    const KernelSpec& last = plan.kernels.back();
    EXPECT_EQ(last.kind, KernelKind::kColumnReduce);
    EXPECT_EQ(last.outputs, check.compiled.graph.outputs);
    EXPECT_NE(last.outputs[0], last.hero);
  }
}

TEST(NeverSlower, WhereStitchingWinsTheStitchedPlanShips) {
  // Softmax over short rows: one row-stitched kernel, against three XLA native kernels or
  // one Triton kernel of the same bytes; the stitched plan is no slower, so it ships.
  Graph g;
  const int x = Param(g, {DType::kF32, {4096, 768}}, 0);
  const int m = Reduce(g, x, ConstScalar(g, DType::kF32, -1e30), {1}, ReduceKind::kMax);
  Output(g, Binary(g, OpCode::kSub, x, Broadcast(g, m, {4096, 768}, {0})));
  CompileOptions options;
  options.emit_ptx = false;
  StatusOr<CompileResult> r = CompileGraph(g, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shipped, PlannerKind::kStitch) << Describe(r->graph, r->plan);
  EXPECT_LE(r->cost.seconds, r->baseline_cost.seconds);
}

// RMSNorm over rows of bf16: x * rsqrt(mean(x^2) + eps) * w.
Graph RmsNorm(int64_t rows, int64_t cols) {
  Graph g;
  const int x = Convert(g, Param(g, {DType::kBF16, {rows, cols}}, 0), DType::kF32);
  const int w = Convert(g, Param(g, {DType::kBF16, {cols}}, 1), DType::kF32);
  const int sum = Reduce(g, Binary(g, OpCode::kMul, x, x), ConstScalar(g, DType::kF32, 0), {1},
                         ReduceKind::kSum);
  const int mean = Binary(g, OpCode::kMul, sum,
                          Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / cols), {rows}, {}));
  const int rstd = Unary(
      g, OpCode::kRsqrt,
      Binary(g, OpCode::kAdd, mean, Broadcast(g, ConstScalar(g, DType::kF32, 1e-6), {rows}, {})));
  const int y =
      Binary(g, OpCode::kMul, Binary(g, OpCode::kMul, x, Broadcast(g, rstd, {rows, cols}, {0})),
             Broadcast(g, w, {rows, cols}, {1}));
  Output(g, Convert(g, y, DType::kBF16));
  return g;
}

// The three planners make the same row kernel of an RMSNorm (suite row #7's shape). Once the
// shipped kernel is assembled, its cubin's registers price the baselines' kernels of the same
// code too, so that one kernel is not modelled at two speeds (and a saving, or a loss, that
// is not there reported).
TEST(NeverSlower, ABaselinesKernelOfTheShippedCodeIsPricedAsAssembled) {
  const Graph g = RmsNorm(2048, 4096);
  CompileOptions options;
  if (!CubinAvailable(options.codegen)) GTEST_SKIP() << "no nvJitLink and no ptxas in this build";
  StatusOr<CompileResult> r = CompileGraph(g, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->shipped, PlannerKind::kStitch) << Describe(r->graph, r->plan);
  ASSERT_EQ(r->plan.kernels.size(), 1u);
  const ThreadMapping& shipped = r->plan.kernels[0].mapping;
  ASSERT_GT(shipped.assembled_registers, 0);
  // Otherwise the assembly would change no price and this test show nothing.
  ASSERT_NE(shipped.assembled_registers, shipped.registers_per_thread);
  ASSERT_EQ(r->baselines.size(), 2u);
  for (const BaselineEstimate& b : r->baselines) {
    ASSERT_TRUE(b.plan.has_value()) << BaselineCompilerName(b.compiler);
    ASSERT_EQ(b.plan->kernels.size(), 1u);
    EXPECT_TRUE(SameCode(b.plan->kernels[0], r->plan.kernels[0])) << Describe(g, *b.plan);
    EXPECT_DOUBLE_EQ(b.cost.seconds, r->cost.seconds) << BaselineCompilerName(b.compiler);
  }
  EXPECT_DOUBLE_EQ(r->baseline_cost.seconds, r->cost.seconds);

  // To PTX only, every plan keeps the scheduler's estimate, and they price alike too, at
  // another figure: the one the assembled plans moved from.
  CompileOptions ptx = options;
  ptx.codegen.emit_cubin = false;
  StatusOr<CompileResult> estimated = CompileGraph(g, ptx);
  ASSERT_TRUE(estimated.ok()) << estimated.status().ToString();
  EXPECT_DOUBLE_EQ(estimated->baseline_cost.seconds, estimated->cost.seconds);
  EXPECT_NE(estimated->cost.seconds, r->cost.seconds);
}

}  // namespace
}  // namespace stitch
