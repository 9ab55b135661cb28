// f32 sine, cosine and tangent as the codegen emits them (its own IR, trig.h), run on the
// emulator, which executes the same IR the GPU does, and held to an ulp bound against the
// correctly rounded result of the double-precision libm: on random arguments of every
// exponent (from a logged seed), on arguments beside multiples of pi/2 (where the reduction
// cancels), at both sides of the switch between the two reductions, and at the special
// values. The kernel that computes them has no local memory in its PTX, which the static
// code checks require and libdevice's versions broke.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "stitch/codegen/ptx_summary.h"
#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/reference/tensor.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Param;
using testing::Unary;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();
// The magnitude at which the emitted code switches from Cody-Waite's reduction to
// Payne-Hanek's (trig.cc).
constexpr float kReductionSwitch = 131072.0f;

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The distance from `actual` to the correctly rounded `exact`, in ulps of the f32 nearest to
// `exact` (of the smallest normal's ulp below it).
double UlpError(float actual, double exact) {
  const float rounded = static_cast<float>(exact);
  int exponent = 0;
  std::frexp(std::max(std::fabs(rounded), std::numeric_limits<float>::min()), &exponent);
  const double ulp = std::ldexp(1.0, exponent - 24);
  return std::fabs(static_cast<double>(actual) - exact) / ulp;
}

// Arguments: the special values; the switch between the reductions; the f32 neighbours of
// k*pi/2 for k up to 4,000, where the near reduction cancels most, and of k * 2^e * pi/2 for
// every exponent the far one takes; and random ones drawn from `seed`: uniform below 10,
// uniform below the switch, and bit patterns spread over every finite exponent.
constexpr int kRandomArguments = 400000;  // of each kind

std::vector<float> Arguments(uint64_t seed) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           kDenormMin,
                           -kDenormMin,
                           1e-30f,
                           -1e-30f,
                           std::numeric_limits<float>::min(),
                           1.0f,
                           -1.0f,
                           kMax,
                           -kMax,
                           kInf,
                           -kInf,
                           std::numeric_limits<float>::quiet_NaN()};
  // Eight f32 on each side of the switch, of both signs.
  float below = kReductionSwitch;
  float above = kReductionSwitch;
  for (int i = 0; i < 8; ++i) {
    xs.insert(xs.end(), {below, -below, above, -above});
    below = std::nextafter(below, 0.0f);
    above = std::nextafter(above, kInf);
  }
  const double half_pi = std::acos(0.0);
  auto around = [&](double v) {
    float x = static_cast<float>(v);
    for (int i = 0; i < 3; ++i) x = std::nextafter(x, 0.0f);
    for (int i = 0; i < 7; ++i, x = std::nextafter(x, kInf)) xs.push_back(x);
  };
  for (int k = 1; k <= 4000; ++k) around(k * half_pi);
  for (int e = 17; e < 126; ++e) {
    for (int k = 1; k < 40; k += 3) around(std::ldexp(static_cast<double>(k), e) * half_pi);
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> small(-10.0f, 10.0f);
  std::uniform_real_distribution<float> below_switch(-kReductionSwitch, kReductionSwitch);
  for (int i = 0; i < kRandomArguments; ++i) xs.push_back(small(rng));
  for (int i = 0; i < kRandomArguments; ++i) xs.push_back(below_switch(rng));
  for (int i = 0; i < kRandomArguments; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float x = FromBits(bits);
    if (std::isfinite(x)) xs.push_back(x);
  }
  return xs;
}

struct TrigRun {
  std::vector<float> args;
  std::vector<std::vector<double>> outputs;  // sin, cos, tan
  std::vector<CompiledKernel> kernels;
};

// Compiles sin, cos and tan of one f32 vector as stitchd ships them and runs them on the
// emulator over Arguments(seed).
TrigRun RunTrig(uint64_t seed) {
  TrigRun run;
  run.args = Arguments(seed);
  const int64_t n = static_cast<int64_t>(run.args.size());
  Graph g;
  g.name = "trig";
  const int x = Param(g, {DType::kF32, {n}}, 0, "x");
  g.outputs = {Unary(g, OpCode::kSin, x), Unary(g, OpCode::kCos, x), Unary(g, OpCode::kTan, x)};
  StatusOr<CompileResult> compiled = CompileGraph(g, CompileOptions{});
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  if (!compiled.ok()) return run;
  Tensor input = Tensor::Zeros(g.nodes[x].shape);
  for (int64_t i = 0; i < n; ++i) input.f[i] = run.args[i];
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create(EmulatorOptions{});
  EXPECT_TRUE(emulator.ok()) << emulator.status().ToString();
  if (!emulator.ok()) return run;
  StatusOr<EmulatedRun> emulated =
      RunOnEmulator(compiled->graph, compiled->kernels, {input}, **emulator);
  EXPECT_TRUE(emulated.ok()) << emulated.status().ToString();
  if (!emulated.ok()) return run;
  for (const Tensor& t : emulated->outputs) run.outputs.push_back(t.f);
  run.kernels = compiled->kernels;
  return run;
}

const TrigRun& SharedRun() {
  static const TrigRun run = [] {
    const uint64_t seed = 20261130;
    std::printf("trig arguments from seed %llu\n", static_cast<unsigned long long>(seed));
    return RunTrig(seed);
  }();
  return run;
}

double (*const kExact[3])(double) = {static_cast<double (*)(double)>(std::sin),
                                     static_cast<double (*)(double)>(std::cos),
                                     static_cast<double (*)(double)>(std::tan)};
const char* const kNames[3] = {"sin", "cos", "tan"};
// sin and cos within 2 ulp, tan (a quotient of the two) within 3.
const double kUlpBound[3] = {2.0, 2.0, 3.0};

TEST(F32Trig, WithinTheirUlpBoundsOnEveryExponent) {
  const TrigRun& run = SharedRun();
  ASSERT_EQ(run.outputs.size(), 3u);
  for (int fn = 0; fn < 3; ++fn) {
    // By reduction: [0] below the switch, [1] at and above it.
    double worst[2] = {0, 0};
    float worst_at[2] = {0, 0};
    int64_t checked[2] = {0, 0};
    for (size_t i = 0; i < run.args.size(); ++i) {
      const float x = run.args[i];
      if (!std::isfinite(x)) continue;
      const int far = std::fabs(x) >= kReductionSwitch ? 1 : 0;
      const double e = UlpError(static_cast<float>(run.outputs[fn][i]), kExact[fn](x));
      ++checked[far];
      if (e > worst[far]) {
        worst[far] = e;
        worst_at[far] = x;
      }
    }
    for (int far = 0; far < 2; ++far) {
      std::printf("%s, |x| %s 2^17: %lld arguments, largest error %.3f ulp at %.9g\n", kNames[fn],
                  far ? ">=" : "<", static_cast<long long>(checked[far]), worst[far],
                  static_cast<double>(worst_at[far]));
      EXPECT_LE(worst[far], kUlpBound[fn]) << kNames[fn] << " at " << worst_at[far];
    }
  }
}

TEST(F32Trig, SpecialValues) {
  const TrigRun& run = SharedRun();
  ASSERT_EQ(run.outputs.size(), 3u);
  for (size_t i = 0; i < run.args.size(); ++i) {
    const float x = run.args[i];
    const double sin = run.outputs[0][i];
    const double cos = run.outputs[1][i];
    const double tan = run.outputs[2][i];
    if (!std::isfinite(x)) {
      EXPECT_TRUE(std::isnan(sin) && std::isnan(cos) && std::isnan(tan)) << x;
    } else if (x == 0) {
      EXPECT_EQ(std::signbit(sin), std::signbit(x)) << "sin keeps the sign of zero";
      EXPECT_EQ(std::signbit(tan), std::signbit(x)) << "tan keeps the sign of zero";
      EXPECT_EQ(cos, 1.0);
    } else if (std::fabs(x) < 1e-20f) {
      EXPECT_EQ(sin, x) << "sin(x) rounds to x this close to zero";
      EXPECT_EQ(tan, x);
    }
  }
}

TEST(F32Trig, KernelKeepsNoLocalMemory) {
  const TrigRun& run = SharedRun();
  ASSERT_FALSE(run.kernels.empty());
  for (const CompiledKernel& k : run.kernels) {
    ASSERT_FALSE(k.ptx.empty()) << k.name;
    EXPECT_EQ(SummarizePtx(k.ptx).local_accesses, 0) << k.name;
    EXPECT_EQ(k.ptx.find(".local"), std::string::npos) << k.name;
    EXPECT_EQ(k.assembly.stack_bytes + k.assembly.spill_store_bytes, 0) << k.name;
  }
}

}  // namespace
}  // namespace stitch
