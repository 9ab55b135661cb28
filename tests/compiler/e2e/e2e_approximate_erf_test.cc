// The approximate f32 erf (codegen's approximate_erf.h: a quotient of two polynomials over
// div.approx.f32), for nodes whose values reach only f16 and bf16 outputs, run on the
// emulator, which executes the IR the GPU does, and held to its documented relative error
// against the double-precision libm: on a grid over [-5, 5], on random arguments from a
// logged seed, on magnitudes down to the smallest subnormal, and at the special values; with
// the division exact, and at the PTX ISA's bound for div.approx.f32. The policy picks it only
// where it may: erf reaching an f32 output stays libdevice's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/reference/tensor.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Convert;
using testing::Param;
using testing::Unary;

constexpr float kInf = std::numeric_limits<float>::infinity();
// approximate_erf.h's bound with the division exact.
constexpr double kErfBound = 4e-7;

std::vector<float> Arguments(uint64_t seed) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           kInf,
                           -kInf,
                           std::numeric_limits<float>::quiet_NaN()};
  for (int i = -500000; i <= 500000; ++i) xs.push_back(static_cast<float>(i) * 1e-5f);
  for (float m = 1e-38f; m < 1.0f; m *= 1.01f) xs.insert(xs.end(), {m, -m});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> wide(-6.0f, 6.0f);
  for (int i = 0; i < 400000; ++i) xs.push_back(wide(rng));
  return xs;
}

// Whether any kernel calls `name` (its libdevice name in the portable IR).
bool Calls(const CompileResult& r, const std::string& name) {
  return std::any_of(r.kernels.begin(), r.kernels.end(), [&](const CompiledKernel& k) {
    return k.portable_ir.find(name) != std::string::npos;
  });
}

// erf of `xs` in f32, compiled with every erf approximate, on the emulator with approximate
// results off by `division_error`.
std::vector<float> ApproximateErf(const std::vector<float>& xs, double division_error) {
  const int64_t n = static_cast<int64_t>(xs.size());
  Graph g;
  g.name = "erf";
  const int x = Param(g, {DType::kF32, {n}}, 0, "x");
  g.outputs = {Unary(g, OpCode::kErf, x)};
  CompileOptions options;
  options.codegen.approximate_math = CodegenOptions::ApproximateMath::kAlways;
  StatusOr<CompileResult> compiled = CompileGraph(g, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  if (!compiled.ok()) return {};
  EXPECT_FALSE(Calls(*compiled, "__nv_erff"));
  EXPECT_TRUE(Calls(*compiled, "__nv_fast_fdividef"));
  Tensor input = Tensor::Zeros(g.nodes[x].shape);
  for (int64_t i = 0; i < n; ++i) input.f[i] = xs[static_cast<size_t>(i)];
  EmulatorOptions eo;
  eo.approximate_math_error = division_error;
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(eo);
  EXPECT_TRUE(emulator.ok()) << emulator.status().ToString();
  if (!emulator.ok()) return {};
  StatusOr<EmulatedRun> run =
      RunOnEmulator(compiled->graph, compiled->kernels, {input}, **emulator);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok()) return {};
  return std::vector<float>(run->outputs[0].f.begin(), run->outputs[0].f.end());
}

// The largest relative error of `got` against libm's erf of the finite arguments whose erf is
// an f32 of normal magnitude. Below it the division flushes (div.approx.ftz.f32): those results
// must be zero of the argument's sign, or within a smallest normal of the exact value.
double WorstRelativeError(const std::vector<float>& xs, const std::vector<float>& got,
                          float* worst_at) {
  constexpr double kSmallestNormal = std::numeric_limits<float>::min();
  double worst = 0;
  for (size_t i = 0; i < xs.size() && i < got.size(); ++i) {
    if (!std::isfinite(xs[i]) || xs[i] == 0) continue;
    const double exact = std::erf(static_cast<double>(xs[i]));
    const double off = std::fabs(static_cast<double>(got[i]) - exact);
    if (std::fabs(exact) < kSmallestNormal) {
      EXPECT_TRUE((got[i] == 0 && std::signbit(got[i]) == std::signbit(xs[i])) ||
                  off <= kSmallestNormal)
          << "erf(" << xs[i] << ") = " << got[i];
      continue;
    }
    const double e = off / std::fabs(exact);
    if (e > worst) {
      worst = e;
      *worst_at = xs[i];
    }
  }
  return worst;
}

TEST(ApproximateErf, WithinItsBoundWithTheDivisionExactAndAtItsBound) {
  const uint64_t seed = 20261201;
  std::printf("erf arguments from seed %llu\n", static_cast<unsigned long long>(seed));
  const std::vector<float> xs = Arguments(seed);
  for (double division_error : {0.0, kApproximateMathErrorBound}) {
    const std::vector<float> got = ApproximateErf(xs, division_error);
    ASSERT_EQ(got.size(), xs.size());
    float at = 0;
    const double worst = WorstRelativeError(xs, got, &at);
    std::printf("division off by %.3g: %zu arguments, largest relative error %.3g at %.9g\n",
                division_error, xs.size(), worst, static_cast<double>(at));
    // The quotient's own error, plus the division's where it is approximate.
    EXPECT_LE(worst, kErfBound + division_error * 1.01) << "at " << at;
    // The comparison sees an error: the division's, where it is added, shows.
    if (division_error > 0) {
      EXPECT_GT(worst, division_error / 2);
    }
  }
}

TEST(ApproximateErf, SpecialValues) {
  const std::vector<float> xs = {0.0f, -0.0f,  kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                                 4.0f, -100.0f};
  const std::vector<float> got = ApproximateErf(xs, 0.0);
  ASSERT_EQ(got.size(), xs.size());
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_FALSE(std::signbit(got[0]));
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_TRUE(std::signbit(got[1])) << "erf keeps the sign of zero";
  EXPECT_NEAR(got[2], 1.0, 2e-7);
  EXPECT_NEAR(got[3], -1.0, 2e-7);
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_NEAR(got[5], 1.0, 2e-7);
  EXPECT_NEAR(got[6], -1.0, 2e-7);
}

// Under the default policy erf is approximate where its value reaches only f16 and bf16
// outputs, and libdevice's where it reaches an f32 one.
TEST(ApproximateErf, ChosenWhereTheValueReachesOnlyHalfOutputs) {
  for (bool f32_output : {false, true}) {
    Graph g;
    g.name = "erf_outputs";
    const int x = Param(g, {DType::kF32, {4096}}, 0, "x");
    const int erf = Unary(g, OpCode::kErf, x);
    g.outputs = {Convert(g, erf, DType::kF16)};
    if (f32_output) g.outputs.push_back(erf);
    StatusOr<CompileResult> compiled = CompileGraph(g, CompileOptions{});
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    EXPECT_EQ(Calls(*compiled, "__nv_erff"), f32_output) << f32_output;
    EXPECT_EQ(Calls(*compiled, "__nv_fast_fdividef"), !f32_output) << f32_output;
  }
}

}  // namespace
}  // namespace stitch
