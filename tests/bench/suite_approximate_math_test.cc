// The approximate math codegen emits for f32 compute (rsqrt.approx.f32 for rsqrt,
// div.approx.f32 for divisions and the logistic's, ex2.approx.f32 of x * log2(e) for exp and
// the logistic's, a quotient of polynomials over div.approx.f32 for erf, 1 - 2 / (1 + e^2|x|)
// over those exp and division for tanh: CodegenOptions::approximate_math), at
// the PTX ISA's error bound. Every suite row that uses them, in f16, bf16 and f32
// (graph_retype.h), runs on the emulator with each approximate result off by
// kApproximateMathErrorBound and still matches the interpreter at the output tolerance; a
// larger error does not, so the comparison would see one. In f32 the division's bound does
// not fit every row (#19's batch-norm swish gradient misses the f32 tolerance when its
// kernels are forced to approximate it), which is why a division that reaches an f32
// output stays exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/shape_scaling.h"
#include "stitch/reference/tensor_compare.h"
#include "suite/suite.h"
#include "support/graph_builder.h"
#include "support/graph_retype.h"
#include "support/known_gaps.h"

namespace stitch::suite {
namespace {

bool UsesApproximateMath(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op == OpCode::kRsqrt || n.op == OpCode::kLogistic || n.op == OpCode::kExp ||
        n.op == OpCode::kErf || n.op == OpCode::kTanh) {
      return true;
    }
    if (n.op == OpCode::kDiv && IsFloat(n.shape.dtype)) return true;
  }
  return false;
}

// The largest relative error of `g`'s outputs (scaled for the emulator) over the output
// tolerance, with approximate results off by `error`; above 1 is a mismatch.
// Compiles `g` for the emulator; with `force_approximate`, re-emits every kernel of the
// plan with every division approximate, whatever outputs it reaches.
StatusOr<CompileResult> CompileForEmulator(const Graph& g, bool force_approximate) {
  CompileOptions options;
  options.emit_ptx = false;
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  STITCH_ASSIGN_OR_RETURN(CompileResult compiled, CompileGraph(g, options));
  if (force_approximate) {
    CodegenOptions codegen = options.codegen;
    codegen.approximate_math = CodegenOptions::ApproximateMath::kAlways;
    for (size_t k = 0; k < compiled.kernels.size(); ++k) {
      STITCH_ASSIGN_OR_RETURN(compiled.kernels[k],
                              EmitKernel(compiled.graph, compiled.plan.kernels[k], codegen));
    }
  }
  return compiled;
}

// Whether any kernel calls the approximate function `name` (its libdevice name in the
// portable IR).
bool Calls(const CompileResult& r, const std::string& name) {
  for (const CompiledKernel& k : r.kernels) {
    if (k.portable_ir.find(name) != std::string::npos) return true;
  }
  return false;
}

bool CallsApproximateMath(const CompileResult& r) {
  return Calls(r, "__nv_rsqrtf") || Calls(r, "__nv_fast_fdividef") || Calls(r, "__nv_fast_expf");
}

// Float inputs are random in [-2, 2) times `input_scale`.
StatusOr<double> WorstErrorOverTolerance(const Graph& g, double error, uint64_t seed,
                                         bool force_approximate = false, double input_scale = 1) {
  STITCH_ASSIGN_OR_RETURN(CompileResult compiled, CompileForEmulator(g, force_approximate));
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (int p : g.Parameters()) {
    inputs.push_back(RandomTensor(g.nodes[p].shape, rng));
    for (double& v : inputs.back().f) v *= input_scale;
  }
  STITCH_ASSIGN_OR_RETURN(std::vector<Tensor> expected, Evaluate(g, inputs));
  EmulatorOptions eo;
  eo.approximate_math_error = error;
  STITCH_ASSIGN_OR_RETURN(std::unique_ptr<Emulator> emulator, Emulator::Create(eo));
  STITCH_ASSIGN_OR_RETURN(EmulatedRun run,
                          RunOnEmulator(compiled.graph, compiled.kernels, inputs, *emulator));
  double worst = 0;
  for (size_t k = 0; k < expected.size(); ++k) {
    const double tolerance = OutputTolerance(g, expected[k].shape.dtype);
    const Comparison c = Compare(expected[k], run.outputs[k], tolerance);
    worst = std::max(worst, c.max_rel_error / tolerance);
  }
  return worst;
}

TEST(ApproximateMath, TheEmulatorAppliesTheBoundToEachApproximateResult) {
  Graph g;
  g.name = "rsqrt_logistic_and_exp";
  const int x = testing::Param(g, {DType::kF32, {1024}}, 0, "x");
  g.outputs = {testing::Unary(g, OpCode::kRsqrt, testing::Unary(g, OpCode::kAbs, x)),
               testing::Unary(g, OpCode::kLogistic, x), testing::Unary(g, OpCode::kExp, x)};
  StatusOr<CompileResult> compiled = CompileForEmulator(g, /*force_approximate=*/true);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_TRUE(CallsApproximateMath(*compiled));
  std::mt19937_64 rng(17);
  const std::vector<Tensor> inputs = {RandomTensor(g.nodes[x].shape, rng)};
  for (double error : {0.0, kApproximateMathErrorBound}) {
    EmulatorOptions eo;
    eo.approximate_math_error = error;
    StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
    ASSERT_TRUE(emulator.ok());
    StatusOr<EmulatedRun> run =
        RunOnEmulator(compiled->graph, compiled->kernels, inputs, **emulator);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    StatusOr<std::vector<Tensor>> exact = Evaluate(g, inputs);
    ASSERT_TRUE(exact.ok());
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      double largest = 0;
      for (int64_t i = 0; i < exact->at(k).size(); ++i) {
        const double want = exact->at(k).AsDouble(i);
        largest = std::max(largest, std::abs(run->outputs[k].AsDouble(i) / want - 1));
      }
      // Within an f32 ulp or two of the error the launch asked for.
      EXPECT_NEAR(largest, error, 0x1p-22) << "output " << k << " at error " << error;
      if (error > 0) {
        EXPECT_GT(largest, error / 2) << "output " << k;
      }
    }
  }
}

// A tanh whose value reaches only a bf16 or f16 output is 1 - 2 / (1 + e^2|x|) over the
// approximate exp and division, its sign copied from x; one that reaches an f32 output is
// libdevice's. At the bound of both, the approximate tanh is within 4e-7 of tanh near zero
// and 2^-21 relative elsewhere, on a sweep of x over [-16, 16) and its subnormals.
TEST(ApproximateMath, ATanhThatReachesOnlyHalfOutputsTakesTheApproximateExpAndDivision) {
  for (DType out : {DType::kBF16, DType::kF16, DType::kF32}) {
    Graph g;
    g.name = "tanh";
    const int x = testing::Param(g, {DType::kF32, {4096}}, 0, "x");
    const int t = testing::Unary(g, OpCode::kTanh, x);
    g.outputs = {out == DType::kF32 ? t : testing::Convert(g, t, out)};
    StatusOr<CompileResult> compiled = CompileForEmulator(g, /*force_approximate=*/false);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    EXPECT_EQ(Calls(*compiled, "__nv_tanhf"), out == DType::kF32) << DTypeName(out);
    EXPECT_EQ(Calls(*compiled, "__nv_fast_expf"), out != DType::kF32) << DTypeName(out);
    EXPECT_EQ(Calls(*compiled, "__nv_fast_fdividef"), out != DType::kF32) << DTypeName(out);
    StatusOr<double> at_bound = WorstErrorOverTolerance(g, kApproximateMathErrorBound, 5200);
    ASSERT_TRUE(at_bound.ok()) << at_bound.status().ToString();
    EXPECT_LE(*at_bound, 1.0) << DTypeName(out);
  }

  Graph g;
  g.name = "tanh_f32";
  const int64_t n = 8192;
  const int x = testing::Param(g, {DType::kF32, {n}}, 0, "x");
  g.outputs = {testing::Unary(g, OpCode::kTanh, x)};
  StatusOr<CompileResult> forced = CompileForEmulator(g, /*force_approximate=*/true);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  ASSERT_FALSE(Calls(*forced, "__nv_tanhf"));
  Tensor xs = Tensor::Zeros(g.nodes[x].shape);
  for (int64_t i = 0; i < n; ++i) xs.f[i] = static_cast<double>(i - n / 2) / 256.0;
  const std::vector<double> specials = {1e-39, -1e-39, 1e-30, -3e-8, 100.0, -100.0, -0.0};
  std::copy(specials.begin(), specials.end(), xs.f.begin());
  for (double error : {0.0, kApproximateMathErrorBound}) {
    EmulatorOptions eo;
    eo.approximate_math_error = error;
    StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
    ASSERT_TRUE(emulator.ok());
    StatusOr<EmulatedRun> run = RunOnEmulator(forced->graph, forced->kernels, {xs}, **emulator);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    double near_zero = 0, relative = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::tanh(static_cast<double>(static_cast<float>(xs.f[i])));
      const double got = run->outputs[0].f[i];
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "tanh(" << xs.f[i] << ") = " << got;
      if (std::abs(xs.f[i]) < 0.5) {
        near_zero = std::max(near_zero, std::abs(got - want));
      } else {
        relative = std::max(relative, std::abs(got / want - 1));
      }
    }
    std::printf("approximate tanh at error %g: %.3g absolute below 0.5, %.3g relative above\n",
                error, near_zero, relative);
    EXPECT_LE(near_zero, 4e-7) << "at error " << error;
    EXPECT_LE(relative, 0x1p-21) << "at error " << error;
  }
}

// Suite row #13 caps its logits at +-50 with a tanh and rounds them to bf16 before the
// softmax, where an ulp of a capped logit near 50 (0.25) moves its probability by 28% of
// itself. With its logits over the cap's whole range (times 64: +-128, capped to +-49.4) and
// the approximate tanh at its bound (2^-11 relative, 0.024 at 50), which can round a capped
// logit an ulp away from the exact tanh's, the probabilities still match the interpreter.
TEST(ApproximateMath, SoftCappedLogitsOverTheCapsRangeMatchAtTheBound) {
  StatusOr<SuiteEntry> entry = BuildSuiteEntry(13);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  std::optional<ScaledGraph> scaled = ScaleForEmulation(entry->graph);
  ASSERT_TRUE(scaled.has_value());
  StatusOr<CompileResult> compiled = CompileForEmulator(scaled->graph, false);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_FALSE(Calls(*compiled, "__nv_tanhf"));
  for (uint64_t seed : {5300, 5301, 5302}) {
    StatusOr<double> at_bound =
        WorstErrorOverTolerance(scaled->graph, kApproximateMathErrorBound, seed, false, 64);
    ASSERT_TRUE(at_bound.ok()) << at_bound.status().ToString();
    std::printf("#13, logits times 64, seed %llu: worst error / tolerance %.3f at the bound\n",
                static_cast<unsigned long long>(seed), *at_bound);
    EXPECT_LE(*at_bound, 1.0) << "seed " << seed;
  }
}

// A softmax with its row sums as an f32 output beside its f16 probabilities (suite row
// #29's outputs): the division reaches the f16 output alone and is approximate; where its f32
// quotient is an output too, it stays exact. Either way the outputs match the interpreter at
// the bound.
TEST(ApproximateMath, ADivisionIsApproximateWhereItReachesOnlyHalfOutputs) {
  for (bool f32_quotient : {false, true}) {
    Graph g;
    g.name = "softmax_with_sums";
    const int64_t rows = 64, cols = 256;
    const int x = testing::Param(g, {DType::kF16, {rows, cols}}, 0, "x");
    const int xf = testing::Convert(g, x, DType::kF32);
    const int zero = testing::ConstScalar(g, DType::kF32, 0);
    const int e = testing::Unary(g, OpCode::kExp, xf);
    const int sums = testing::Reduce(g, e, zero, {1}, ReduceKind::kSum);
    const int quotient =
        testing::Binary(g, OpCode::kDiv, e, testing::Broadcast(g, sums, {rows, cols}, {0}));
    g.outputs = {sums, testing::Convert(g, quotient, DType::kF16)};
    if (f32_quotient) g.outputs.push_back(quotient);
    StatusOr<CompileResult> compiled = CompileForEmulator(g, /*force_approximate=*/false);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    EXPECT_EQ(Calls(*compiled, "__nv_fast_fdividef"), !f32_quotient) << f32_quotient;
    // Its exp reaches the f32 row sums, so it stays exact.
    EXPECT_FALSE(Calls(*compiled, "__nv_fast_expf"));
    StatusOr<double> at_bound = WorstErrorOverTolerance(g, kApproximateMathErrorBound, 5100);
    ASSERT_TRUE(at_bound.ok()) << at_bound.status().ToString();
    EXPECT_LE(*at_bound, 1.0) << f32_quotient;
  }
}

// The lines of `ptx` inside its loops: from a label to the last branch back to it.
std::vector<std::string> LoopLines(const std::string& ptx) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < ptx.size();) {
    const size_t end = std::min(ptx.find('\n', at), ptx.size());
    lines.push_back(ptx.substr(at, end - at));
    at = end + 1;
  }
  std::vector<std::string> in_loops;
  for (size_t first = 0; first < lines.size(); ++first) {
    const std::string& line = lines[first];
    if (line.empty() || line[0] != '$' || line.back() != ':') continue;
    const std::string label = line.substr(0, line.size() - 1) + ";";
    for (size_t last = lines.size(); last-- > first;) {
      const bool back = lines[last].find("bra") != std::string::npos &&
                        lines[last].find(label) != std::string::npos;
      if (!back) continue;
      in_loops.insert(in_loops.end(), lines.begin() + static_cast<std::ptrdiff_t>(first),
                      lines.begin() + static_cast<std::ptrdiff_t>(last) + 1);
      break;
    }
  }
  return in_loops;
}

// An approximate division is a reciprocal and a multiply in the IR (the two instructions
// ptxas makes of div.approx.ftz.f32), so a divisor that does not change in a loop has its
// reciprocal taken once, before the loop: suite row #19's loop keeps each thread on its
// channels and divides by four per-channel values, which took four MUFU.RCP a trip of four
// elements beside the four of its logistic (one an element), all eight inside the loop.
TEST(ApproximateMath, ALoopInvariantDivisorTakesItsReciprocalBeforeTheLoop) {
  StatusOr<SuiteEntry> entry = BuildSuiteEntry(19);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  StatusOr<CompileResult> compiled = CompileGraph(entry->graph, testing::Sm90Compile());
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  ASSERT_EQ(compiled->kernels.size(), 1u);
  const ThreadMapping& m = compiled->plan.kernels[0].mapping;
  ASSERT_GT(m.column_period, 0);
  const std::string& ptx = compiled->kernels[0].ptx;
  const std::vector<std::string> loop = LoopLines(ptx);
  ASSERT_FALSE(loop.empty()) << ptx;
  const auto divisions = [](const std::string& line) {
    return line.find("rcp.approx") != std::string::npos ||
           line.find("div.approx") != std::string::npos;
  };
  const int in_loop = static_cast<int>(std::count_if(loop.begin(), loop.end(), divisions));
  int in_kernel = 0;
  for (size_t at = ptx.find("approx.ftz.f32"); at != std::string::npos;
       at = ptx.find("approx.ftz.f32", at + 1)) {
    in_kernel += ptx.compare(at - 4, 4, "rcp.") == 0;
  }
  EXPECT_EQ(in_loop, m.vector_width) << ptx;  // the logistic's, one an element
  EXPECT_EQ(in_kernel - in_loop, 4) << ptx;   // the per-channel values', before the loop
}

// The approximate exp and reciprocal flush subnormals (DefineFlushToZeroApproximations): the
// PTX has only their .ftz forms, and the emulator gives what those give, zero of the sign for
// a subnormal exp argument or result, divisor or reciprocal. The division's multiply is an
// ordinary one and keeps a subnormal dividend.
TEST(ApproximateMath, ExpAndDivisionFlushSubnormalsAsTheGpuDoes) {
  Graph g;
  g.name = "exp_and_division";
  const int x = testing::Param(g, {DType::kF32, {5}}, 0, "x");
  const int y = testing::Param(g, {DType::kF32, {5}}, 1, "y");
  g.outputs = {testing::Binary(g, OpCode::kDiv, x, y), testing::Unary(g, OpCode::kExp, x)};
  CompileOptions options;
  options.codegen.approximate_math = CodegenOptions::ApproximateMath::kAlways;
  StatusOr<CompileResult> lowered = CompileGraph(g, options);
  ASSERT_TRUE(lowered.ok()) << lowered.status().ToString();
  std::string ptx;
  for (const CompiledKernel& k : lowered->kernels) ptx += k.ptx;
  EXPECT_NE(ptx.find("rcp.approx.ftz.f32"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find("mul.rn.ftz.f32"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("mul.rn.f32"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("ex2.approx.ftz.f32"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find("rcp.approx.f32"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find("div.approx"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find("ex2.approx.f32"), std::string::npos) << ptx;

  StatusOr<CompileResult> compiled = CompileForEmulator(g, /*force_approximate=*/true);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const float subnormal = 1e-39f;
  Tensor xs = Tensor::Zeros(g.nodes[x].shape), ys = Tensor::Zeros(g.nodes[y].shape);
  xs.f = {subnormal, 1.0f, -subnormal, -100.0f, 1.0f};
  ys.f = {1.0f, subnormal, 2.0f, 1.0f, 0x1p127f};
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(EmulatorOptions{});
  ASSERT_TRUE(emulator.ok());
  StatusOr<EmulatedRun> run =
      RunOnEmulator(compiled->graph, compiled->kernels, {xs, ys}, **emulator);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::vector<double>& quotient = run->outputs[0].f;
  const std::vector<double>& exp = run->outputs[1].f;
  EXPECT_EQ(quotient[0], static_cast<double>(subnormal));          // a subnormal dividend, kept
  EXPECT_TRUE(std::isinf(quotient[1]));                            // a subnormal divisor: 1 / +0
  EXPECT_EQ(quotient[2], static_cast<double>(-subnormal / 2.0f));  // a subnormal quotient
  EXPECT_EQ(quotient[4], 0.0);  // 2^-127, a subnormal reciprocal, flushed
  EXPECT_EQ(exp[3], 0.0);       // e^-100, a subnormal result
  EXPECT_NEAR(exp[1], std::exp(1.0), 1e-5);
}

// The suite rows that use approximate math, retyped to `dtype` and scaled for the emulator.
std::vector<std::pair<int, Graph>> RowsUsingApproximateMath(DType dtype) {
  std::vector<std::pair<int, Graph>> rows;
  for (int id = 1; id <= kSuiteSize; ++id) {
    StatusOr<SuiteEntry> entry = BuildSuiteEntry(id);
    if (!entry.ok() || !UsesApproximateMath(entry->graph)) continue;
    std::optional<ScaledGraph> scaled =
        ScaleForEmulation(testing::RetypeFloats(entry->graph, dtype));
    if (scaled.has_value()) rows.emplace_back(id, std::move(scaled->graph));
  }
  return rows;
}

class ApproximateMathInHalfTypes : public ::testing::TestWithParam<DType> {};

TEST_P(ApproximateMathInHalfTypes, SuiteRowsMatchAtTheBound) {
  const DType dtype = GetParam();
  const std::vector<std::pair<int, Graph>> rows = RowsUsingApproximateMath(dtype);
  EXPECT_GE(rows.size(), 10u);  // layernorms, RMSNorms, swish and SiLU
  double worst = 0, worst_loose = 0;
  for (const auto& [id, g] : rows) {
    const uint64_t seed = 5000 + static_cast<uint64_t>(id);
    StatusOr<CompileResult> compiled = CompileForEmulator(g, /*force_approximate=*/false);
    ASSERT_TRUE(compiled.ok()) << "#" << id << ": " << compiled.status().ToString();
    EXPECT_TRUE(CallsApproximateMath(*compiled)) << "#" << id << " in " << DTypeName(dtype);
    StatusOr<double> at_bound = WorstErrorOverTolerance(g, kApproximateMathErrorBound, seed);
    ASSERT_TRUE(at_bound.ok()) << "#" << id << ": " << at_bound.status().ToString();
    // An error 2^13 times the bound, for contrast: the same comparison must see it.
    StatusOr<double> loose = WorstErrorOverTolerance(g, 0x1p-9, seed);
    ASSERT_TRUE(loose.ok()) << "#" << id << ": " << loose.status().ToString();
    std::printf("#%d in %s: worst error / tolerance %.3f at the bound, %.2f at 2^-9\n", id,
                std::string(DTypeName(dtype)).c_str(), *at_bound, *loose);
    EXPECT_LE(*at_bound, 1.0) << "#" << id << " misses its tolerance at the bound, seed " << seed;
    worst = std::max(worst, *at_bound);
    worst_loose = std::max(worst_loose, *loose);
  }
  std::printf("worst error / tolerance in %s: %.3f at the bound\n",
              std::string(DTypeName(dtype)).c_str(), worst);
  EXPECT_GT(worst_loose, 1.0) << "a 2^-9 error should miss the tolerance somewhere";
}

INSTANTIATE_TEST_SUITE_P(Suite, ApproximateMathInHalfTypes,
                         ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// f32 outputs: rsqrt stays approximate and meets the f32 tolerance at the bound; the
// logistic's division and every exp are exact, and forced to approximate them would miss the
// tolerance.
TEST(ApproximateMath, F32OutputsDivideExactly) {
  int forced_misses = 0, rsqrt_rows = 0;
  for (const auto& [id, g] : RowsUsingApproximateMath(DType::kF32)) {
    const uint64_t seed = 5000 + static_cast<uint64_t>(id);
    StatusOr<CompileResult> compiled = CompileForEmulator(g, /*force_approximate=*/false);
    ASSERT_TRUE(compiled.ok()) << "#" << id << ": " << compiled.status().ToString();
    EXPECT_FALSE(Calls(*compiled, "__nv_fast_fdividef")) << "#" << id;
    EXPECT_FALSE(Calls(*compiled, "__nv_fast_expf")) << "#" << id;
    rsqrt_rows += Calls(*compiled, "__nv_rsqrtf") ? 1 : 0;
    StatusOr<double> shipped = WorstErrorOverTolerance(g, kApproximateMathErrorBound, seed);
    ASSERT_TRUE(shipped.ok()) << "#" << id << ": " << shipped.status().ToString();
    EXPECT_LE(*shipped, 1.0) << "#" << id << " misses its tolerance at the bound, seed " << seed;
    StatusOr<double> forced = WorstErrorOverTolerance(g, kApproximateMathErrorBound, seed, true);
    ASSERT_TRUE(forced.ok()) << "#" << id << ": " << forced.status().ToString();
    std::printf(
        "#%d in f32: worst error / tolerance %.3f at the bound, %.3f with approximate division "
        "and exp\n",
        id, *shipped, *forced);
    forced_misses += *forced > 1.0 ? 1 : 0;
  }
  EXPECT_GE(rsqrt_rows, 8);
  EXPECT_GE(forced_misses, 1)
      << "no f32 row needs exact division and exp: the driver's rule is moot";
}

}  // namespace
}  // namespace stitch::suite
