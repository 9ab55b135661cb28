// Column reductions whose reduced dimensions lie between kept ones, with the input's
// minor-most dimension kept: a reduction over the pixels of NHWC storage, `[N, H·W, C]` over
// H·W, as channels-last GroupNorm's and batch norm's backward make. A lane takes a few
// consecutive channels, which are consecutive elements of the input, so it loads them as one
// vector (ColumnIndices in codegen's reduction.cc); operands broadcast along the channels of a
// reshaped tensor read the lane's channels as they are (ElementalEmitter's ReshapeOperand), so
// they are loaded once per lane, not once per row, also where the lane's math calls the math
// library between one channel's loads and the next. Measured on the emulator (every warp
// access fetches whole sectors) and checked against the interpreter, in f32, f16 and bf16.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>

#include "stitch/codegen/ptx_summary.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/gpu_device.h"
#include "support/emulator_check.h"
#include "support/known_gaps.h"
#include "support/normalization_graphs.h"

namespace stitch {
namespace {

using namespace stitch::testing;

// Per-channel sums over the pixels of x `[n, h, w, c]` (stored NHWC) scaled by a per-channel
// gamma and a per-image, per-channel scale, as a GroupNorm backward's gradient sums: the
// product is formed over `[n, h, w, c]` and reshaped to `[n, h·w, c]` for the reduction.
// With `exp`, x's exponential is scaled, as a SiLU's or softmax's backward has.
Graph PixelSums(DType t, int64_t n, int64_t h, int64_t w, int64_t c, bool exp = false) {
  Graph g;
  g.name = exp ? "pixel_sums_of_exp" : "pixel_sums";
  int x = ToF32(g, Param(g, {t, {n, h, w, c}}, 0, "x"));
  if (exp) x = Unary(g, OpCode::kExp, x);
  const int gamma = Param(g, {DType::kF32, {c}}, 1, "gamma");
  const int scale = Param(g, {DType::kF32, {n, c}}, 2, "scale");
  const int scaled = Binary(g, OpCode::kMul, x, Broadcast(g, gamma, {n, h, w, c}, {3}));
  const int y = Binary(g, OpCode::kMul, scaled, Broadcast(g, scale, {n, h, w, c}, {0, 3}));
  const int pixels = Reshape(g, y, {n, h * w, c});
  g.outputs = {Reduce(g, pixels, ConstScalar(g, DType::kF32, 0), {1}, ReduceKind::kSum)};
  return g;
}

// Compiles `g` for sm_90 into `r`, which stays empty unless it plans as one column reduction
// whose lanes take several columns.
void CompileOneColumnReduction(const Graph& g, std::optional<CompileResult>& r) {
  ASSERT_TRUE(Verify(g).ok());
  StatusOr<CompileResult> compiled = CompileGraph(g, Sm90Compile());
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_EQ(compiled->plan.kernels.size(), 1u) << Describe(compiled->graph, compiled->plan);
  const KernelSpec& k = compiled->plan.kernels[0];
  ASSERT_EQ(k.kind, KernelKind::kColumnReduce) << Describe(compiled->graph, compiled->plan);
  ASSERT_GE(k.mapping.vector_width, 2) << Describe(compiled->graph, compiled->plan);
  r = std::move(compiled).value();
}

// The lane's figures on the emulator: fetched/used of its one column-reduce kernel, with the
// interpreter's results checked.
void CheckPixelSums(DType t, bool exp) {
  SCOPED_TRACE(std::string(DTypeName(t)) + (exp ? " of exp" : ""));
  const Graph g = PixelSums(t, 8, 64, 64, 128, exp);
  std::optional<CompileResult> r;
  CompileOneColumnReduction(g, r);
  if (!r) return;
  const KernelSpec& k = r->plan.kernels[0];

  const SectorTrafficOptions options = SectorTrafficOptionsFor(*FindDevice("H100"));
  StatusOr<SampledRun> run = MeasureSectorTraffic(r->graph, r->plan, r->kernels, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->launches.size(), 1u);
  const LaunchStats& stats = run->launches[0].stats;
  std::printf("%s%s: %d channels a lane, fetched/used %.2f, %llu warp loads\n",
              std::string(DTypeName(t)).c_str(), exp ? " of exp" : "", k.mapping.vector_width,
              FetchedPerUsed(stats),
              static_cast<unsigned long long>(stats.sector_loads.warp_accesses));
  // Loaded a channel at a time, a warp's load of x spans width x 32 elements for 32 used,
  // and the per-image scale loaded in every row's iteration likewise. What remains is read
  // once per work item: the lane's two channels of the scale, 4-byte loads a channel apart,
  // and the split's partials.
  EXPECT_LE(FetchedPerUsed(stats), 1.2);

  EmulatorCheck check;
  EXPECT_TRUE(CheckOnEmulator(g, 31, /*random_order=*/true, &check));
}

TEST(ColumnLanes, ALanesChannelsOfNhwcPixelsAreOneVectorAndWholeSectors) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) CheckPixelSums(t, /*exp=*/false);
}

// The exponential of each channel is a call of the math library between that channel's
// operands and the next one's. The calls are declared pure and returning (CallMath), so the
// later channels' per-channel and per-image operands are known to be loaded whenever the loop
// runs, and LLVM hoists them out of it as it does the first channel's; otherwise the
// emulator, which calls the library where NVPTX inlines it, would load them in every row.
TEST(ColumnLanes, OperandsReadAfterAMathCallAreLoadedOncePerLane) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) CheckPixelSums(t, /*exp=*/true);
}

// A GELU's gradient beside its bias gradient, the column sums of it (suite row #11's
// pattern over [rows, cols]): dx = dy * (cdf(x) + x * pdf(x)), stored in `t`, and the sums of
// dx over the rows. The lane's side output, dx, is computed through the math library's erf.
Graph GeluGradAndBiasGrad(DType t, int64_t rows, int64_t cols) {
  Graph g;
  g.name = "gelu_grad_and_bias_grad";
  const int dy = ToF32(g, Param(g, {t, {rows, cols}}, 0, "dy"));
  const int x = ToF32(g, Param(g, {t, {rows, cols}}, 1, "x"));
  const int erf = Unary(g, OpCode::kErf, Binary(g, OpCode::kMul, x, Splat(g, x, M_SQRT1_2)));
  const int cdf =
      Binary(g, OpCode::kMul, Binary(g, OpCode::kAdd, erf, Splat(g, x, 1.0)), Splat(g, x, 0.5));
  const int square = Binary(g, OpCode::kMul, x, x);
  const int pdf = Binary(g, OpCode::kMul,
                         Unary(g, OpCode::kExp, Binary(g, OpCode::kMul, square, Splat(g, x, -0.5))),
                         Splat(g, x, 0.5 * M_2_SQRTPI * M_SQRT1_2));
  const int dx =
      Binary(g, OpCode::kMul, dy, Binary(g, OpCode::kAdd, cdf, Binary(g, OpCode::kMul, x, pdf)));
  const int dbias = Reduce(g, dx, ConstScalar(g, DType::kF32, 0), {0}, ReduceKind::kSum);
  g.outputs = {FromF32(g, dx, t), FromF32(g, dbias, t)};
  return g;
}

// The math library's branches end the straight line in which the backend merges a lane's
// accesses: each column's gradient, stored right after its own math, went out one element at
// a time (#11: eight 2-byte stores a lane where one 16-byte store does). Stored after every
// column's math, the lane's gradient leaves in one vector as wide as its loads.
TEST(ColumnLanes, SideOutputsOfMathLibraryLanesLeaveAsOneVector) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    std::optional<CompileResult> r;
    CompileOneColumnReduction(GeluGradAndBiasGrad(t, 3072, 4096), r);
    if (!r) continue;
    const int width = r->plan.kernels[0].mapping.vector_width;
    const int lane_bytes = width * static_cast<int>(DTypeBytes(t));
    const PtxMemorySummary ptx = SummarizePtx(r->kernels[0].ptx);
    // Loads of dy and x, one vector each a lane; the stores of dx as wide.
    EXPECT_EQ(ptx.widest_global_load, std::min(lane_bytes, 16));
    EXPECT_EQ(ptx.widest_global_store, std::min(lane_bytes, 16));
    EXPECT_EQ(ptx.global_stores_by_bytes[DTypeBytes(t)], 0) << r->kernels[0].ptx;

    EmulatorCheck check;
    EXPECT_TRUE(
        CheckOnEmulator(GeluGradAndBiasGrad(t, 96, 512), 37, /*random_order=*/true, &check));
  }
}

}  // namespace
}  // namespace stitch
