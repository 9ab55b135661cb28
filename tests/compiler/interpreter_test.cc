// Tests of the reference interpreter against hand-computed values and independent formulas.
#include "stitch/compiler/interpreter.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "stitch/compiler/philox.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): stitch::testing builders

Shape S(DType t, std::vector<int64_t> dims = {}) { return Shape{t, std::move(dims)}; }

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DType F32 = DType::kF32, F64 = DType::kF64, F16 = DType::kF16, BF16 = DType::kBF16,
                S8 = DType::kS8, S32 = DType::kS32, S64 = DType::kS64, U8 = DType::kU8,
                U32 = DType::kU32, U64 = DType::kU64, PRED = DType::kPred;

Tensor F(Shape s, std::vector<double> v) {
  Tensor t;
  t.shape = std::move(s);
  t.f = std::move(v);
  return t;
}

Tensor I(Shape s, std::vector<int64_t> v) {
  Tensor t;
  t.shape = std::move(s);
  t.i = std::move(v);
  return t;
}

// A 1-D tensor of dtype `t` holding `v` (floats or integers by dtype).
Tensor Vec(DType t, std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  if (IsFloat(t)) return F(S(t, {n}), std::move(v));
  std::vector<int64_t> iv;
  for (double x : v) iv.push_back(static_cast<int64_t>(x));
  return I(S(t, {n}), std::move(iv));
}

std::vector<Tensor> EvalAll(const Graph& g, const std::vector<Tensor>& params) {
  StatusOr<std::vector<Tensor>> r = Evaluate(g, params);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<Tensor>(g.outputs.size());
}

Tensor Eval1(const Graph& g, const std::vector<Tensor>& params) { return EvalAll(g, params)[0]; }

// op(x) on a parameter x.
Tensor RunUnary(OpCode op, const Tensor& x) {
  Graph g;
  Output(g, Unary(g, op, Param(g, x.shape, 0)));
  return Eval1(g, {x});
}

Tensor RunBin(OpCode op, const Tensor& a, const Tensor& b) {
  Graph g;
  Output(g, Binary(g, op, Param(g, a.shape, 0), Param(g, b.shape, 1)));
  return Eval1(g, {a, b});
}

Tensor RunCompare(CompareDirection d, const Tensor& a, const Tensor& b) {
  Graph g;
  Output(g, Compare(g, d, Param(g, a.shape, 0), Param(g, b.shape, 1)));
  return Eval1(g, {a, b});
}

Tensor RunConvert(const Tensor& x, DType to, bool bitcast = false) {
  Graph g;
  const int p = Param(g, x.shape, 0);
  Output(g, bitcast ? BitcastConvert(g, p, to) : Convert(g, p, to));
  return Eval1(g, {x});
}

// Compares float vectors bit for bit in value (NaN equals NaN; -0 differs from +0).
void ExpectSameFloats(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << "at " << k << ": " << got[k];
    } else {
      EXPECT_EQ(got[k], want[k]) << "at " << k;
      EXPECT_EQ(std::signbit(got[k]), std::signbit(want[k])) << "sign at " << k;
    }
  }
}

std::vector<double> Range(int64_t n, double scale = 1.0) {
  std::vector<double> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<double>(k) * scale;
  return v;
}

// ---------------------------------------------------------------------------------------
// Philox and rng-uniform.

TEST(InterpreterPhilox, Random123KnownAnswers) {
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      Philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      Philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  static_assert(Philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);
}

TEST(InterpreterRng, MatchesSemanticsFormula) {
  const uint64_t seed = 0x0123456789abcdefull;
  Graph g;
  const int s = ConstI(g, S(U64), {static_cast<int64_t>(seed)});
  Output(g, RngUniform(g, s, S(F32, {3, 5}), 7));
  Output(g, RngUniform(g, s, S(F32, {3, 5}), 8));
  Output(g, RngUniform(g, s, S(F16, {3, 5}), 7));
  const std::vector<Tensor> out = EvalAll(g, {});
  ASSERT_EQ(out.size(), 3u);
  for (int64_t k = 0; k < 15; ++k) {
    const PhiloxCounter ctr = {static_cast<uint32_t>(k), 0, 7, 0};
    const uint32_t w = Philox4x32_10(ctr, {0x89abcdef, 0x01234567})[0];
    const double want = static_cast<double>(w >> 8) / 16777216.0;
    EXPECT_EQ(out[0].f[k], want) << k;
    EXPECT_GE(out[0].f[k], 0.0);
    EXPECT_LT(out[0].f[k], 1.0);
    EXPECT_NE(out[1].f[k], out[0].f[k]) << "streams must differ at " << k;
    EXPECT_EQ(out[2].f[k], RoundToDType(want, F16)) << k;
  }
  // The counter's second word carries bits 32..63 of the index.
  EXPECT_EQ(RngUniformBits(seed, uint64_t{1} << 32, 7),
            Philox4x32_10({0, 1, 7, 0}, {0x89abcdef, 0x01234567})[0]);
}

// ---------------------------------------------------------------------------------------
// Elementwise, floats.

TEST(InterpreterElementwise, FloatUnaryHandComputed) {
  auto run = [](OpCode op, std::vector<double> x) { return RunUnary(op, Vec(F32, x)).f; };
  ExpectSameFloats(run(OpCode::kNeg, {1.5, 0.0}), {-1.5, -0.0});
  ExpectSameFloats(run(OpCode::kAbs, {-2.0, -0.0}), {2.0, 0.0});
  ExpectSameFloats(run(OpCode::kExp, {0.0, 1.0}), {1.0, std::numbers::e});
  ExpectSameFloats(run(OpCode::kLog, {1.0, 0.0, -1.0}), {0.0, -kInf, kNaN});
  ExpectSameFloats(run(OpCode::kLog1p, {0.0}), {0.0});
  ExpectSameFloats(run(OpCode::kExpm1, {0.0}), {0.0});
  ExpectSameFloats(run(OpCode::kTanh, {0.0, kInf}), {0.0, 1.0});
  ExpectSameFloats(run(OpCode::kLogistic, {0.0, -kInf, kInf}), {0.5, 0.0, 1.0});
  ExpectSameFloats(run(OpCode::kSqrt, {4.0, -1.0}), {2.0, kNaN});
  ExpectSameFloats(run(OpCode::kRsqrt, {4.0, 0.0}), {0.5, kInf});
  const std::vector<double> cbrt = run(OpCode::kCbrt, {27.0, -8.0});
  EXPECT_NEAR(cbrt[0], 3.0, 1e-15);
  EXPECT_NEAR(cbrt[1], -2.0, 1e-15);
  ExpectSameFloats(run(OpCode::kErf, {0.0, kInf}), {0.0, 1.0});
  ExpectSameFloats(run(OpCode::kSin, {0.0}), {0.0});
  ExpectSameFloats(run(OpCode::kCos, {0.0}), {1.0});
  ExpectSameFloats(run(OpCode::kTan, {0.0}), {0.0});
  ExpectSameFloats(run(OpCode::kFloor, {-1.5, 1.5, -0.0}), {-2.0, 1.0, -0.0});
  ExpectSameFloats(run(OpCode::kCeil, {-1.5, 1.5, -0.5}), {-1.0, 2.0, -0.0});
  ExpectSameFloats(run(OpCode::kRound, {2.5, -2.5, 0.5, 1.4, -0.4}), {3.0, -3.0, 1.0, 1.0, -0.0});
  ExpectSameFloats(run(OpCode::kRoundNearestEven, {2.5, 3.5, -2.5, 0.5, 1.5000001, -0.4, kInf}),
                   {2.0, 4.0, -2.0, 0.0, 2.0, -0.0, kInf});
  ExpectSameFloats(run(OpCode::kSign, {-3.0, 2.0, 0.0, -0.0, kNaN, -kInf}),
                   {-1.0, 1.0, 0.0, -0.0, kNaN, -1.0});
  EXPECT_NEAR(run(OpCode::kSin, {std::numbers::pi / 6})[0], 0.5, 1e-15);
  EXPECT_EQ(RunUnary(OpCode::kIsFinite, Vec(F16, {1.0, kInf, -kInf, kNaN})).i,
            (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(RunUnary(OpCode::kIsFinite, Vec(F16, {1.0})).shape.dtype, PRED);
}

TEST(InterpreterElementwise, FloatBinaryAndNaN) {
  auto run = [](OpCode op, std::vector<double> a, std::vector<double> b) {
    return RunBin(op, Vec(F64, a), Vec(F64, b)).f;
  };
  ExpectSameFloats(run(OpCode::kAdd, {1, kInf}, {2, -kInf}), {3, kNaN});
  ExpectSameFloats(run(OpCode::kSub, {1}, {2}), {-1});
  ExpectSameFloats(run(OpCode::kMul, {3}, {-0.5}), {-1.5});
  ExpectSameFloats(run(OpCode::kDiv, {1, -1, 0}, {0, 0, 0}), {kInf, -kInf, kNaN});
  ExpectSameFloats(run(OpCode::kPow, {2, 4, 0}, {10, 0.5, 0}), {1024, 2, 1});
  ExpectSameFloats(run(OpCode::kAtan2, {1, 0}, {1, -1}), {std::numbers::pi / 4, std::numbers::pi});
  ExpectSameFloats(run(OpCode::kRem, {-7, 7, 5.5, 1}, {2, -2, 2, 0}), {-1, 1, 1.5, kNaN});
  ExpectSameFloats(run(OpCode::kMax, {kNaN, 1, 1, -0.0, 0.0, -kInf}, {1, kNaN, 2, 0.0, -0.0, -5}),
                   {kNaN, kNaN, 2, 0.0, 0.0, -5});
  ExpectSameFloats(run(OpCode::kMin, {kNaN, 1, 1, -0.0, 0.0}, {1, kNaN, 2, 0.0, -0.0}),
                   {kNaN, kNaN, 1, -0.0, -0.0});
}

TEST(InterpreterElementwise, F32NodesAreNotRoundedBetweenOps) {
  // Only convert rounds: 1 + 2^-30 survives in an f32 node, and disappears after a convert.
  Graph g;
  const int x = Param(g, S(F32, {1}), 0);
  const int sum = Binary(g, OpCode::kAdd, x, ConstF(g, S(F32, {1}), {std::ldexp(1.0, -30)}));
  Output(g, sum);
  Output(g, Convert(g, sum, F32));
  const std::vector<Tensor> out = EvalAll(g, {Vec(F32, {1.0})});
  EXPECT_EQ(out[0].f[0], 1.0 + std::ldexp(1.0, -30));
  EXPECT_EQ(out[1].f[0], 1.0);
}

TEST(InterpreterElementwise, CompareNaNAndSignedness) {
  using D = CompareDirection;
  const Tensor a = Vec(F32, {kNaN, 1, 1, -0.0, 2});
  const Tensor b = Vec(F32, {1, kNaN, 1, 0.0, 1});
  EXPECT_EQ(RunCompare(D::kEq, a, b).i, (std::vector<int64_t>{0, 0, 1, 1, 0}));
  EXPECT_EQ(RunCompare(D::kNe, a, b).i, (std::vector<int64_t>{1, 1, 0, 0, 1}));
  EXPECT_EQ(RunCompare(D::kLt, a, b).i, (std::vector<int64_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(RunCompare(D::kLe, a, b).i, (std::vector<int64_t>{0, 0, 1, 1, 0}));
  EXPECT_EQ(RunCompare(D::kGt, a, b).i, (std::vector<int64_t>{0, 0, 0, 0, 1}));
  EXPECT_EQ(RunCompare(D::kGe, a, b).i, (std::vector<int64_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(RunCompare(D::kLt, Vec(S32, {-1, 5}), Vec(S32, {1, 5})).i,
            (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(RunCompare(D::kGt, I(S(U32, {1}), {0xffffffff}), I(S(U32, {1}), {1})).i,
            std::vector<int64_t>{1});
  EXPECT_EQ(RunCompare(D::kGt, I(S(U64, {2}), {-1, 1}), I(S(U64, {2}), {1, -1})).i,
            (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(RunCompare(D::kGt, I(S(S64, {1}), {-1}), I(S(S64, {1}), {1})).i,
            std::vector<int64_t>{0});
}

TEST(InterpreterElementwise, SelectAndClamp) {
  Graph g;
  const int p = Param(g, S(PRED, {3}), 0);
  const int a = Param(g, S(F32, {3}), 1);
  const int b = Param(g, S(F32, {3}), 2);
  Output(g, Select(g, p, a, b));
  Output(g, Clamp(g, ConstF(g, S(F32, {3}), {-1.0}), a, ConstF(g, S(F32, {3}), {1.0})));
  const std::vector<Tensor> out =
      EvalAll(g, {I(S(PRED, {3}), {1, 0, 1}), Vec(F32, {-5, kNaN, 0.5}), Vec(F32, {10, 20, 30})});
  ExpectSameFloats(out[0].f, {-5, 20, 0.5});
  ExpectSameFloats(out[1].f, {-1, kNaN, 0.5});

  Graph gi;
  const int lo = Param(gi, S(U8, {3}), 0);
  const int x = Param(gi, S(U8, {3}), 1);
  const int hi = Param(gi, S(U8, {3}), 2);
  Output(gi, Clamp(gi, lo, x, hi));
  EXPECT_EQ(Eval1(gi, {Vec(U8, {10, 10, 10}), Vec(U8, {5, 200, 255}), Vec(U8, {100, 100, 250})}).i,
            (std::vector<int64_t>{10, 100, 250}));
}

// ---------------------------------------------------------------------------------------
// Elementwise, integers.

TEST(InterpreterElementwise, IntegerUnary) {
  EXPECT_EQ(RunUnary(OpCode::kNeg, Vec(S8, {-128, 5, 0})).i, (std::vector<int64_t>{-128, -5, 0}));
  EXPECT_EQ(RunUnary(OpCode::kNeg, Vec(U8, {1, 0})).i, (std::vector<int64_t>{255, 0}));
  EXPECT_EQ(RunUnary(OpCode::kAbs, Vec(S8, {-128, -5, 7})).i, (std::vector<int64_t>{-128, 5, 7}));
  EXPECT_EQ(RunUnary(OpCode::kAbs, I(S(S64, {1}), {INT64_MIN})).i, std::vector<int64_t>{INT64_MIN});
  EXPECT_EQ(RunUnary(OpCode::kAbs, Vec(U8, {200})).i, std::vector<int64_t>{200});
  EXPECT_EQ(RunUnary(OpCode::kSign, Vec(S32, {-5, 0, 7})).i, (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(RunUnary(OpCode::kSign, I(S(U64, {2}), {0, -1})).i, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(RunUnary(OpCode::kNot, Vec(S8, {0, -1})).i, (std::vector<int64_t>{-1, 0}));
  EXPECT_EQ(RunUnary(OpCode::kNot, Vec(U8, {0, 0x0f})).i, (std::vector<int64_t>{255, 0xf0}));
  EXPECT_EQ(RunUnary(OpCode::kNot, Vec(PRED, {0, 1})).i, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(RunUnary(OpCode::kPopcnt, Vec(S8, {-1, 0, 5})).i, (std::vector<int64_t>{8, 0, 2}));
  EXPECT_EQ(RunUnary(OpCode::kPopcnt, Vec(S32, {-1})).i, std::vector<int64_t>{32});
  EXPECT_EQ(RunUnary(OpCode::kPopcnt, I(S(U64, {1}), {-1})).i, std::vector<int64_t>{64});
}

TEST(InterpreterElementwise, IntegerArithmeticWraps) {
  EXPECT_EQ(RunBin(OpCode::kAdd, Vec(S8, {127, -128}), Vec(S8, {1, -1})).i,
            (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(RunBin(OpCode::kAdd, Vec(U8, {255}), Vec(U8, {1})).i, std::vector<int64_t>{0});
  EXPECT_EQ(RunBin(OpCode::kSub, Vec(U8, {0}), Vec(U8, {1})).i, std::vector<int64_t>{255});
  EXPECT_EQ(RunBin(OpCode::kAdd, I(S(U64, {1}), {-1}), I(S(U64, {1}), {1})).i,
            std::vector<int64_t>{0});
  EXPECT_EQ(RunBin(OpCode::kAdd, I(S(S64, {1}), {INT64_MAX}), I(S(S64, {1}), {1})).i,
            std::vector<int64_t>{INT64_MIN});
  EXPECT_EQ(RunBin(OpCode::kMul, Vec(S32, {65536}), Vec(S32, {65536})).i, std::vector<int64_t>{0});
  EXPECT_EQ(RunBin(OpCode::kMul, I(S(U32, {1}), {0xffffffff}), I(S(U32, {1}), {0xffffffff})).i,
            std::vector<int64_t>{1});
  EXPECT_EQ(RunBin(OpCode::kMul, I(S(U64, {1}), {-1}), I(S(U64, {1}), {-1})).i,
            std::vector<int64_t>{1});
  EXPECT_EQ(RunBin(OpCode::kAnd, Vec(S32, {12}), Vec(S32, {10})).i, std::vector<int64_t>{8});
  EXPECT_EQ(RunBin(OpCode::kOr, Vec(S32, {12}), Vec(S32, {10})).i, std::vector<int64_t>{14});
  EXPECT_EQ(RunBin(OpCode::kXor, Vec(S32, {12}), Vec(S32, {10})).i, std::vector<int64_t>{6});
  EXPECT_EQ(RunBin(OpCode::kOr, Vec(PRED, {0, 1, 0}), Vec(PRED, {0, 0, 1})).i,
            (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(RunBin(OpCode::kMax, Vec(S32, {-1, 3}), Vec(S32, {1, 2})).i,
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(RunBin(OpCode::kMax, I(S(U32, {1}), {0xffffffff}), I(S(U32, {1}), {1})).i,
            std::vector<int64_t>{0xffffffff});
  EXPECT_EQ(RunBin(OpCode::kMin, I(S(U64, {2}), {-1, 3}), I(S(U64, {2}), {1, 2})).i,
            (std::vector<int64_t>{1, 2}));
}

TEST(InterpreterElementwise, IntegerDivisionEdgeCases) {
  EXPECT_EQ(RunBin(OpCode::kDiv, Vec(S32, {7, -7, 7, -7, 5, 0}), Vec(S32, {2, 2, -2, -2, 0, 0})).i,
            (std::vector<int64_t>{3, -3, -3, 3, -1, -1}));
  EXPECT_EQ(RunBin(OpCode::kDiv, I(S(S32, {1}), {INT32_MIN}), I(S(S32, {1}), {-1})).i,
            std::vector<int64_t>{INT32_MIN});
  EXPECT_EQ(RunBin(OpCode::kDiv, I(S(S64, {1}), {INT64_MIN}), I(S(S64, {1}), {-1})).i,
            std::vector<int64_t>{INT64_MIN});
  EXPECT_EQ(RunBin(OpCode::kDiv, Vec(S8, {-128}), Vec(S8, {-1})).i, std::vector<int64_t>{-128});
  EXPECT_EQ(RunBin(OpCode::kDiv, I(S(U32, {2}), {7, 0xffffffff}), I(S(U32, {2}), {0, 2})).i,
            (std::vector<int64_t>{0xffffffff, 0x7fffffff}));
  EXPECT_EQ(RunBin(OpCode::kDiv, I(S(U64, {2}), {7, -1}), I(S(U64, {2}), {0, 2})).i,
            (std::vector<int64_t>{-1, INT64_MAX}));
  EXPECT_EQ(RunBin(OpCode::kRem, Vec(S32, {7, -7, 7, -7, 5}), Vec(S32, {2, 2, -2, -2, 0})).i,
            (std::vector<int64_t>{1, -1, 1, -1, 5}));
  EXPECT_EQ(RunBin(OpCode::kRem, I(S(S64, {1}), {INT64_MIN}), I(S(S64, {1}), {-1})).i,
            std::vector<int64_t>{0});
  EXPECT_EQ(RunBin(OpCode::kRem, I(S(S32, {1}), {INT32_MIN}), I(S(S32, {1}), {-1})).i,
            std::vector<int64_t>{0});
  EXPECT_EQ(RunBin(OpCode::kRem, Vec(U8, {200, 9}), Vec(U8, {0, 4})).i,
            (std::vector<int64_t>{200, 1}));
  EXPECT_EQ(RunBin(OpCode::kRem, I(S(U64, {1}), {-1}), I(S(U64, {1}), {10})).i,
            std::vector<int64_t>{5});  // 18446744073709551615 % 10
}

TEST(InterpreterElementwise, Shifts) {
  const OpCode shl = OpCode::kShiftLeft, shrl = OpCode::kShiftRightLogical,
               shra = OpCode::kShiftRightArithmetic;
  EXPECT_EQ(RunBin(shl, Vec(S32, {1, 1, 1, 3}), Vec(S32, {31, 32, -1, 1})).i,
            (std::vector<int64_t>{INT32_MIN, 0, 0, 6}));
  EXPECT_EQ(RunBin(shl, Vec(S8, {1, 1}), Vec(S8, {7, 8})).i, (std::vector<int64_t>{-128, 0}));
  EXPECT_EQ(RunBin(shl, I(S(S64, {2}), {1, 1}), I(S(S64, {2}), {63, 64})).i,
            (std::vector<int64_t>{INT64_MIN, 0}));
  EXPECT_EQ(RunBin(shrl, Vec(S32, {-1, -1, -1, 16}), Vec(S32, {28, 32, -3, 2})).i,
            (std::vector<int64_t>{15, 0, 0, 4}));
  EXPECT_EQ(RunBin(shrl, Vec(U8, {0x80, 0x80}), Vec(U8, {7, 8})).i, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(RunBin(shrl, I(S(U64, {1}), {-1}), I(S(U64, {1}), {63})).i, std::vector<int64_t>{1});
  EXPECT_EQ(RunBin(shra, Vec(S32, {-8, -8, 8, -8, 8}), Vec(S32, {1, 40, 40, -1, 31})).i,
            (std::vector<int64_t>{-4, -1, 0, -1, 0}));
  EXPECT_EQ(RunBin(shra, Vec(U8, {0x80, 0x80, 0x40}), Vec(U8, {1, 9, 9})).i,
            (std::vector<int64_t>{0xc0, 0xff, 0}));
  EXPECT_EQ(RunBin(shra, I(S(S64, {2}), {INT64_MIN, INT64_MIN}), I(S(S64, {2}), {63, 64})).i,
            (std::vector<int64_t>{-1, -1}));
}

// ---------------------------------------------------------------------------------------
// convert and bitcast-convert.

TEST(InterpreterConvert, FloatToIntegerSaturatesAndMapsNaNToZero) {
  const Tensor x = Vec(F32, {300.7, -300.0, -1.9, 1.9, kNaN, kInf, -kInf, -0.5});
  EXPECT_EQ(RunConvert(x, S8).i, (std::vector<int64_t>{127, -128, -1, 1, 0, 127, -128, 0}));
  EXPECT_EQ(RunConvert(x, U8).i, (std::vector<int64_t>{255, 0, 0, 1, 0, 255, 0, 0}));
  EXPECT_EQ(RunConvert(Vec(F64, {1e19, -1e19, std::ldexp(1.0, 63), -std::ldexp(1.0, 63),
                                 std::ldexp(1.0, 63) - 1024}),
                       S64)
                .i,
            (std::vector<int64_t>{INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX - 1023}));
  EXPECT_EQ(RunConvert(Vec(F64, {1e20, std::ldexp(1.0, 63), -1.0, 18446744073709549568.0}), U64).i,
            (std::vector<int64_t>{-1, INT64_MIN, 0, -2048}));
  EXPECT_EQ(RunConvert(Vec(F64, {4294967296.0, 4294967295.0, 3e9}), U32).i,
            (std::vector<int64_t>{0xffffffff, 0xffffffff, 3000000000}));
  EXPECT_EQ(RunConvert(Vec(F64, {2147483648.0, -2147483649.0}), S32).i,
            (std::vector<int64_t>{INT32_MAX, INT32_MIN}));
  EXPECT_EQ(RunConvert(Vec(F32, {0.0, -0.0, 0.5, kNaN}), PRED).i,
            (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(InterpreterConvert, FloatToFloatRoundsOnce) {
  ExpectSameFloats(RunConvert(Vec(F64, {65520, 1 + std::ldexp(1, -11), 0.1, -1e-9}), F16).f,
                   {kInf, 1.0, 0.0999755859375, -0.0});
  ExpectSameFloats(RunConvert(Vec(F64, {0.1, 1e300, kNaN}), F32).f,
                   {static_cast<double>(0.1f), kInf, kNaN});
  ExpectSameFloats(RunConvert(Vec(F32, {std::numbers::pi, 1 + std::ldexp(1, -8)}), BF16).f,
                   {3.140625, 1.0});
  ExpectSameFloats(RunConvert(Vec(F16, {0.1}), F64).f, {0.1});  // f64: no rounding at all
}

TEST(InterpreterConvert, IntegerToFloatRoundsToNearestEvenOnce) {
  // 2^60 + 2^36 + 1 is just above the midpoint of two f32 values; via double it would land
  // exactly on the midpoint and round down.
  const int64_t v = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  EXPECT_EQ(RunConvert(I(S(S64, {1}), {v}), F32).f[0], std::ldexp(1.0, 60) + std::ldexp(1.0, 37));
  EXPECT_EQ(RunConvert(I(S(S64, {1}), {-v}), F32).f[0],
            -(std::ldexp(1.0, 60) + std::ldexp(1.0, 37)));
  EXPECT_EQ(RunConvert(I(S(S64, {1}), {(int64_t{1} << 53) + 1}), F64).f[0], std::ldexp(1.0, 53));
  EXPECT_EQ(RunConvert(I(S(S64, {1}), {(int64_t{1} << 53) + 3}), F64).f[0],
            std::ldexp(1.0, 53) + 4);
  EXPECT_EQ(RunConvert(I(S(U64, {1}), {-1}), F32).f[0], std::ldexp(1.0, 64));
  EXPECT_EQ(RunConvert(I(S(U64, {1}), {-1}), F64).f[0], std::ldexp(1.0, 64));
  EXPECT_EQ(RunConvert(I(S(S64, {1}), {INT64_MIN}), F32).f[0], -std::ldexp(1.0, 63));
  EXPECT_EQ(RunConvert(Vec(S32, {16777217, 16777219}), F32).f,
            (std::vector<double>{16777216, 16777220}));
  EXPECT_EQ(RunConvert(Vec(S32, {2049, 70000}), F16).f, (std::vector<double>{2048, kInf}));
  EXPECT_EQ(RunConvert(Vec(S32, {257}), BF16).f, std::vector<double>{256});
  EXPECT_EQ(RunConvert(Vec(U8, {255}), F32).f, std::vector<double>{255});
  EXPECT_EQ(RunConvert(Vec(PRED, {0, 1}), F32).f, (std::vector<double>{0, 1}));
}

TEST(InterpreterConvert, IntegerToIntegerKeepsLowBitsAndExtendsBySource) {
  EXPECT_EQ(RunConvert(Vec(S8, {-1}), U32).i, std::vector<int64_t>{0xffffffff});
  EXPECT_EQ(RunConvert(Vec(S8, {-1}), U64).i, std::vector<int64_t>{-1});
  EXPECT_EQ(RunConvert(Vec(U8, {255}), S8).i, std::vector<int64_t>{-1});
  EXPECT_EQ(RunConvert(Vec(U8, {255}), S32).i, std::vector<int64_t>{255});
  EXPECT_EQ(RunConvert(Vec(S32, {0x12345678, 0x180}), U8).i, (std::vector<int64_t>{0x78, 0x80}));
  EXPECT_EQ(RunConvert(Vec(S32, {0x180}), S8).i, std::vector<int64_t>{-128});
  EXPECT_EQ(RunConvert(I(S(U32, {1}), {0xffffffff}), S64).i, std::vector<int64_t>{0xffffffff});
  EXPECT_EQ(RunConvert(I(S(U32, {1}), {0xffffffff}), S32).i, std::vector<int64_t>{-1});
  EXPECT_EQ(RunConvert(Vec(S32, {0, 5, -1, 256}), PRED).i, (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(RunConvert(Vec(PRED, {1, 0}), S32).i, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(RunConvert(Vec(PRED, {1}), U64).i, std::vector<int64_t>{1});
}

TEST(InterpreterConvert, BitcastConvertIsExact) {
  EXPECT_EQ(RunConvert(Vec(F32, {1.0, -0.0}), S32, true).i,
            (std::vector<int64_t>{0x3f800000, INT32_MIN}));
  EXPECT_EQ(RunConvert(Vec(F32, {-2.0}), U32, true).i, std::vector<int64_t>{0xc0000000});
  // An f32 node holds an unrounded double; its bits are those of the value rounded to f32.
  EXPECT_EQ(RunConvert(Vec(F32, {0.1}), S32, true).i,
            std::vector<int64_t>{std::bit_cast<int32_t>(0.1f)});
  EXPECT_EQ(RunConvert(Vec(F64, {-0.0}), S64, true).i, std::vector<int64_t>{INT64_MIN});
  EXPECT_EQ(RunConvert(Vec(F64, {1.5}), U64, true).i,
            std::vector<int64_t>{std::bit_cast<int64_t>(1.5)});
  EXPECT_EQ(RunConvert(Vec(U8, {200}), S8, true).i, std::vector<int64_t>{-56});
  EXPECT_EQ(RunConvert(Vec(S8, {-56}), U8, true).i, std::vector<int64_t>{200});
  ExpectSameFloats(RunConvert(Vec(S32, {0x40490fdb}), F32, true).f,
                   {static_cast<double>(std::bit_cast<float>(0x40490fdb))});
  // NaN payloads survive a round trip through f32.
  Graph g;
  const int x = Param(g, S(S32, {2}), 0);
  Output(g, BitcastConvert(g, BitcastConvert(g, x, F32), S32));
  EXPECT_EQ(Eval1(g, {Vec(S32, {0x7fc00001, static_cast<int32_t>(0xffbfffff)})}).i,
            (std::vector<int64_t>{0x7fc00001, static_cast<int32_t>(0xffbfffff)}));
}

// ---------------------------------------------------------------------------------------
// Data movement.

TEST(InterpreterDataMovement, Broadcast) {
  Graph g;
  const int row = Param(g, S(F32, {3}), 0);
  const int col = Param(g, S(F32, {2}), 1);
  const int scalar = Param(g, S(F32), 2);
  const int m = Param(g, S(F32, {2, 3}), 3);
  Output(g, Broadcast(g, row, {2, 3}, {1}));
  Output(g, Broadcast(g, col, {2, 3}, {0}));
  Output(g, Broadcast(g, scalar, {2, 2}, {}));
  Output(g, Broadcast(g, m, {2, 4, 3}, {0, 2}));
  const Tensor mv = F(S(F32, {2, 3}), {1, 2, 3, 4, 5, 6});
  const std::vector<Tensor> out =
      EvalAll(g, {Vec(F32, {1, 2, 3}), Vec(F32, {10, 20}), F(S(F32), {7}), mv});
  EXPECT_EQ(out[0].f, (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(out[1].f, (std::vector<double>{10, 10, 10, 20, 20, 20}));
  EXPECT_EQ(out[2].f, (std::vector<double>{7, 7, 7, 7}));
  ASSERT_EQ(out[3].f.size(), 24u);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(out[3].f[(i * 4 + j) * 3 + k], mv.f[i * 3 + k]);
}

TEST(InterpreterDataMovement, ReshapeKeepsRowMajorOrder) {
  Graph g;
  Output(g, Reshape(g, Param(g, S(S32, {2, 3}), 0), {3, 1, 2}));
  const Tensor out = Eval1(g, {I(S(S32, {2, 3}), {1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(out.shape, S(S32, {3, 1, 2}));
  EXPECT_EQ(out.i, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(InterpreterDataMovement, Transpose) {
  Graph g;
  const int x = Param(g, S(F32, {2, 3, 4}), 0);
  Output(g, Transpose(g, x, {2, 0, 1}));
  Output(g, Transpose(g, Param(g, S(F32, {2, 3}), 1), {1, 0}));
  const Tensor in = F(S(F32, {2, 3, 4}), Range(24));
  const std::vector<Tensor> out = EvalAll(g, {in, F(S(F32, {2, 3}), {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(out[0].shape, S(F32, {4, 2, 3}));
  // out[a][b][c] = in[b][c][a].
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(out[0].f[(a * 2 + b) * 3 + c], in.f[(b * 3 + c) * 4 + a]);
  EXPECT_EQ(out[1].f, (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(InterpreterDataMovement, SliceWithStrides) {
  Graph g;
  Output(g, Slice(g, Param(g, S(F32, {4, 5}), 0), {1, 0}, {4, 5}, {2, 2}));
  Output(g, Slice(g, Param(g, S(F32, {4, 5}), 1), {0, 1}, {4, 5}, {3, 3}));
  const Tensor in = F(S(F32, {4, 5}), Range(20));
  const std::vector<Tensor> out = EvalAll(g, {in, in});
  EXPECT_EQ(out[0].shape.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[0].f, (std::vector<double>{5, 7, 9, 15, 17, 19}));
  EXPECT_EQ(out[1].shape.dims, (std::vector<int64_t>{2, 2}));  // ceil(4/3), ceil(4/3)
  EXPECT_EQ(out[1].f, (std::vector<double>{1, 4, 16, 19}));
}

TEST(InterpreterDataMovement, Concatenate) {
  Graph g;
  const int a = Param(g, S(S32, {2, 1}), 0);
  const int b = Param(g, S(S32, {2, 2}), 1);
  Output(g, Concat(g, {a, b, a}, 1));
  Output(g, Concat(g, {b, b}, 0));
  const std::vector<Tensor> out =
      EvalAll(g, {I(S(S32, {2, 1}), {1, 2}), I(S(S32, {2, 2}), {3, 4, 5, 6})});
  EXPECT_EQ(out[0].shape.dims, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(out[0].i, (std::vector<int64_t>{1, 3, 4, 1, 2, 5, 6, 2}));
  EXPECT_EQ(out[1].i, (std::vector<int64_t>{3, 4, 5, 6, 3, 4, 5, 6}));
}

TEST(InterpreterDataMovement, PadLowHighInteriorAndNegative) {
  const double p = -1;
  auto pad1d = [](std::vector<int64_t> lo, std::vector<int64_t> hi, std::vector<int64_t> in) {
    Graph g;
    Output(g, Pad(g, Param(g, S(F32, {3}), 0), ConstF(g, S(F32), {-1}), lo, hi, in));
    return Eval1(g, {Vec(F32, {1, 2, 3})}).f;
  };
  EXPECT_EQ(pad1d({1}, {2}, {1}), (std::vector<double>{p, 1, p, 2, p, 3, p, p}));
  EXPECT_EQ(pad1d({-1}, {-1}, {0}), (std::vector<double>{2}));
  EXPECT_EQ(pad1d({-2}, {0}, {1}), (std::vector<double>{2, p, 3}));
  EXPECT_EQ(pad1d({0}, {-2}, {2}), (std::vector<double>{1, p, p, 2, p}));
  EXPECT_EQ(pad1d({-3}, {1}, {0}), (std::vector<double>{p}));

  Graph g;
  Output(g, Pad(g, Param(g, S(S32, {2, 2}), 0), ConstI(g, S(S32), {0}), {1, -1}, {0, 1}, {1, 0}));
  const Tensor out = Eval1(g, {I(S(S32, {2, 2}), {1, 2, 3, 4})});
  // rows: 1 + 0 + 2 + 1 = 4; cols: -1 + 1 + 2 = 2.
  EXPECT_EQ(out.shape.dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(out.i, (std::vector<int64_t>{0, 0, 2, 0, 0, 0, 4, 0}));
}

TEST(InterpreterDataMovement, Reverse) {
  Graph g;
  const int x = Param(g, S(F32, {2, 3}), 0);
  Output(g, Reverse(g, x, {1}));
  Output(g, Reverse(g, x, {0, 1}));
  Output(g, Reverse(g, x, {0}));
  const std::vector<Tensor> out = EvalAll(g, {F(S(F32, {2, 3}), {1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(out[0].f, (std::vector<double>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(out[1].f, (std::vector<double>{6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(out[2].f, (std::vector<double>{4, 5, 6, 1, 2, 3}));
}

TEST(InterpreterLeaves, IotaAndConstants) {
  Graph g;
  Output(g, Iota(g, S(S32, {2, 3}), 1));
  Output(g, Iota(g, S(F32, {2, 3}), 0));
  Output(g, Iota(g, S(F16, {2050}), 0));
  Output(g, Iota(g, S(S8, {200}), 0));
  Output(g, ConstF(g, S(F32, {2, 2}), {1.5}));
  Output(g, ConstI(g, S(S32, {3}), {1, -2, 3}));
  Output(g, ConstI(g, S(U64), {-1}));
  Output(g, ConstI(g, S(U8, {2}), {-1, 256}));  // literal values are wrapped to the dtype
  const std::vector<Tensor> out = EvalAll(g, {});
  EXPECT_EQ(out[0].i, (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(out[1].f, (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(out[2].f[2047], 2047.0);
  EXPECT_EQ(out[2].f[2049], 2048.0);  // 2049 is not an f16 value: ties to even
  EXPECT_EQ(out[3].i[127], 127);
  EXPECT_EQ(out[3].i[128], -128);
  EXPECT_EQ(out[4].f, (std::vector<double>{1.5, 1.5, 1.5, 1.5}));
  EXPECT_EQ(out[5].i, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(out[6].i, std::vector<int64_t>{-1});
  EXPECT_EQ(out[6].AsDouble(0), 18446744073709551615.0);
  EXPECT_EQ(out[7].i, (std::vector<int64_t>{255, 0}));
}

// ---------------------------------------------------------------------------------------
// Reduce.

TEST(InterpreterReduce, NonContiguousDimsAndInitOnce) {
  Graph g;
  const int x = Param(g, S(F64, {2, 3, 4}), 0);
  Output(g, Reduce(g, x, ConstF(g, S(F64), {10}), {0, 2}, ReduceKind::kSum));
  Output(g, Reduce(g, x, ConstF(g, S(F64), {0}), {1}, ReduceKind::kMax));
  Output(g, Reduce(g, x, ConstF(g, S(F64), {1}), {0, 1, 2}, ReduceKind::kProd));
  Output(g, Reduce(g, x, ConstF(g, S(F64), {kInf}), {2}, ReduceKind::kMin));
  std::vector<double> v(24);
  for (int k = 0; k < 24; ++k) v[k] = (k % 7) - 3 + 0.5 * (k % 2);
  const std::vector<Tensor> out = EvalAll(g, {F(S(F64, {2, 3, 4}), v)});
  auto at = [&](int i, int j, int k) { return v[(i * 3 + j) * 4 + k]; };
  ASSERT_EQ(out[0].shape.dims, std::vector<int64_t>{3});
  for (int j = 0; j < 3; ++j) {
    double s = 10;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += at(i, j, k);
    EXPECT_EQ(out[0].f[j], s) << j;
  }
  ASSERT_EQ(out[1].shape.dims, (std::vector<int64_t>{2, 4}));
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(out[1].f[i * 4 + k], std::max({0.0, at(i, 0, k), at(i, 1, k), at(i, 2, k)}));
    }
  double prod = 1;
  for (double e : v) prod *= e;
  EXPECT_EQ(out[2].shape.rank(), 0);
  EXPECT_EQ(out[2].f[0], prod);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(out[3].f[i * 3 + j],
                std::min({at(i, j, 0), at(i, j, 1), at(i, j, 2), at(i, j, 3)}));
    }
}

TEST(InterpreterReduce, NaNPropagatesThroughMaxAndMin) {
  Graph g;
  const int x = Param(g, S(F32, {2, 3}), 0);
  Output(g, Reduce(g, x, ConstF(g, S(F32), {-kInf}), {1}, ReduceKind::kMax));
  Output(g, Reduce(g, x, ConstF(g, S(F32), {kInf}), {1}, ReduceKind::kMin));
  Output(g, Reduce(g, x, ConstF(g, S(F32), {kNaN}), {0}, ReduceKind::kMin));
  const std::vector<Tensor> out = EvalAll(g, {F(S(F32, {2, 3}), {1, kNaN, 3, 4, 5, 6})});
  ExpectSameFloats(out[0].f, {kNaN, 6});
  ExpectSameFloats(out[1].f, {kNaN, 4});
  ExpectSameFloats(out[2].f, {kNaN, kNaN, kNaN});
}

TEST(InterpreterReduce, IntegersAndPred) {
  Graph g;
  const int x = Param(g, S(S8, {2, 2}), 0);
  Output(g, Reduce(g, x, ConstI(g, S(S8), {0}), {1}, ReduceKind::kSum));
  const int u = Param(g, S(U32, {3}), 1);
  Output(g, Reduce(g, u, ConstI(g, S(U32), {0}), {0}, ReduceKind::kMax));
  Output(g, Reduce(g, u, ConstI(g, S(U32), {0xffffffff}), {0}, ReduceKind::kMin));
  const int p = Param(g, S(PRED, {2, 3}), 2);
  Output(g, Reduce(g, p, ConstI(g, S(PRED), {1}), {1}, ReduceKind::kAnd));
  Output(g, Reduce(g, p, ConstI(g, S(PRED), {0}), {1}, ReduceKind::kOr));
  Output(g, Reduce(g, u, ConstI(g, S(U32), {2}), {0}, ReduceKind::kProd));
  const std::vector<Tensor> out = EvalAll(
      g, {I(S(S8, {2, 2}), {100, 100, -100, -100}), I(S(U32, {3}), {5, 0xfffffffe, 0x10000}),
          I(S(PRED, {2, 3}), {1, 1, 1, 1, 0, 1})});
  EXPECT_EQ(out[0].i, (std::vector<int64_t>{-56, 56}));  // 200 and -200 wrapped to s8
  EXPECT_EQ(out[1].i, std::vector<int64_t>{0xfffffffe});
  EXPECT_EQ(out[2].i, std::vector<int64_t>{5});
  EXPECT_EQ(out[3].i, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(out[4].i, (std::vector<int64_t>{1, 1}));
  // 2 * 5 * 0xfffffffe * 0x10000 mod 2^32 = 10 * (2^32 - 2) * 2^16 mod 2^32 = (-20 * 2^16) mod
  // 2^32.
  EXPECT_EQ(out[5].i, std::vector<int64_t>{(int64_t{1} << 32) - 20 * 65536});
}

TEST(InterpreterReduce, EmptyReductionGivesInit) {
  Graph g;
  Output(g,
         Reduce(g, Param(g, S(F32, {0, 3}), 0), ConstF(g, S(F32), {2.5}), {0}, ReduceKind::kSum));
  EXPECT_EQ(Eval1(g, {F(S(F32, {0, 3}), {})}).f, (std::vector<double>{2.5, 2.5, 2.5}));
}

// ---------------------------------------------------------------------------------------
// Whole graphs against direct double computations.

TEST(InterpreterGraphs, SoftmaxMatchesDirectComputation) {
  const int64_t rows = 4, cols = 33;
  Graph g;
  const int x = Param(g, S(F32, {rows, cols}), 0);
  const int m = Reduce(g, x, ConstF(g, S(F32), {-kInf}), {1}, ReduceKind::kMax);
  const int e =
      Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, x, Broadcast(g, m, {rows, cols}, {0})));
  const int s = Reduce(g, e, ConstF(g, S(F32), {0}), {1}, ReduceKind::kSum);
  Output(g, Binary(g, OpCode::kDiv, e, Broadcast(g, s, {rows, cols}, {0})));
  std::mt19937_64 rng(42);
  const Tensor in = RandomTensor(S(F32, {rows, cols}), rng);
  const Tensor out = Eval1(g, {in});
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -kInf, sum = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, in.f[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(in.f[r * cols + c] - mx);
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_NEAR(out.f[r * cols + c], std::exp(in.f[r * cols + c] - mx) / sum, 1e-15);
    }
  }
}

TEST(InterpreterGraphs, LayerNormMatchesDirectComputation) {
  const int64_t rows = 3, cols = 64;
  const double eps = 1e-5;
  Graph g;
  const int x = Param(g, S(F32, {rows, cols}), 0);
  const int gamma = Param(g, S(F32, {cols}), 1);
  const int beta = Param(g, S(F32, {cols}), 2);
  const std::vector<int64_t> full = {rows, cols};
  const int n = ConstF(g, S(F32, {rows}), {static_cast<double>(cols)});
  const int zero = ConstF(g, S(F32), {0});
  const int mean = Binary(g, OpCode::kDiv, Reduce(g, x, zero, {1}, ReduceKind::kSum), n);
  const int centered = Binary(g, OpCode::kSub, x, Broadcast(g, mean, full, {0}));
  const int var = Binary(
      g, OpCode::kDiv,
      Reduce(g, Binary(g, OpCode::kMul, centered, centered), zero, {1}, ReduceKind::kSum), n);
  const int inv =
      Unary(g, OpCode::kRsqrt, Binary(g, OpCode::kAdd, var, ConstF(g, S(F32, {rows}), {eps})));
  const int normed = Binary(g, OpCode::kMul, centered, Broadcast(g, inv, full, {0}));
  Output(g, Binary(g, OpCode::kAdd, Binary(g, OpCode::kMul, normed, Broadcast(g, gamma, full, {1})),
                   Broadcast(g, beta, full, {1})));
  std::mt19937_64 rng(7);
  const Tensor in = RandomTensor(S(F32, {rows, cols}), rng);
  const Tensor gm = RandomTensor(S(F32, {cols}), rng);
  const Tensor bt = RandomTensor(S(F32, {cols}), rng);
  const Tensor out = Eval1(g, {in, gm, bt});
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) mu += in.f[r * cols + c];
    mu /= cols;
    for (int64_t c = 0; c < cols; ++c) v += (in.f[r * cols + c] - mu) * (in.f[r * cols + c] - mu);
    v /= cols;
    for (int64_t c = 0; c < cols; ++c) {
      const double want = (in.f[r * cols + c] - mu) / std::sqrt(v + eps) * gm.f[c] + bt.f[c];
      EXPECT_NEAR(out.f[r * cols + c], want, 1e-12);
    }
  }
}

TEST(InterpreterGraphs, SharedOperandsDuplicateOutputsAndDeadNodes) {
  Graph g;
  const int x = Param(g, S(S32, {2}), 0);
  const int sum = Binary(g, OpCode::kAdd, x, x);
  Unary(g, OpCode::kNeg, x);  // dead: not an output, not used
  Output(g, sum);
  Output(g, sum);
  Output(g, x);
  const std::vector<Tensor> out = EvalAll(g, {Vec(S32, {3, -4})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].i, (std::vector<int64_t>{6, -8}));
  EXPECT_EQ(out[1].i, (std::vector<int64_t>{6, -8}));
  EXPECT_EQ(out[2].i, (std::vector<int64_t>{3, -4}));
}

// ---------------------------------------------------------------------------------------
// Parameter validation.

TEST(InterpreterParams, RejectsMismatchedArguments) {
  Graph g;
  const int a = Param(g, S(F32, {2}), 0);
  const int b = Param(g, S(S32, {2}), 1);
  Output(g, Binary(g, OpCode::kAdd, a, Convert(g, b, F32)));
  auto expect_invalid = [&](const std::vector<Tensor>& params, const std::string& what) {
    StatusOr<std::vector<Tensor>> r = Evaluate(g, params);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  expect_invalid({Vec(F32, {1, 2})}, "2 parameters, got 1");
  expect_invalid({Vec(F32, {1, 2}), Vec(S32, {1, 2}), Vec(S32, {1})}, "got 3");
  expect_invalid({Vec(F32, {1, 2, 3}), Vec(S32, {1, 2})}, "expects f32[2], got f32[3]");
  expect_invalid({Vec(F32, {1, 2}), Vec(U32, {1, 2})}, "expects s32[2], got u32[2]");
  expect_invalid({F(S(F32, {2}), {1}), Vec(S32, {1, 2})}, "holds 1 float");
  expect_invalid({Vec(F32, {1, 2}), F(S(S32, {2}), {1, 2})}, "parameter 1");
  EXPECT_TRUE(Evaluate(g, {Vec(F32, {1, 2}), Vec(S32, {1, 2})}).ok());
}

TEST(InterpreterParams, MalformedGraphsFailCleanly) {
  // Graphs that skipped the verifier must give an error, not a crash.
  auto expect_invalid = [](const Graph& g, const std::vector<Tensor>& params) {
    StatusOr<std::vector<Tensor>> r = Evaluate(g, params);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  };
  Graph mixed;
  Output(mixed,
         Binary(mixed, OpCode::kAdd, Param(mixed, S(F32, {2}), 0), Param(mixed, S(S32, {2}), 1)));
  expect_invalid(mixed, {Vec(F32, {1, 2}), Vec(S32, {1, 2})});
  Graph float_not;
  Output(float_not, Unary(float_not, OpCode::kNot, Param(float_not, S(F32, {2}), 0)));
  expect_invalid(float_not, {Vec(F32, {1, 2})});
  Graph int_exp;
  Output(int_exp, Unary(int_exp, OpCode::kExp, Param(int_exp, S(S32, {2}), 0)));
  expect_invalid(int_exp, {Vec(S32, {1, 2})});
  Graph bad_literal;
  Output(bad_literal, ConstF(bad_literal, S(F32, {3}), {1, 2}));
  expect_invalid(bad_literal, {});
  Graph sizes;
  Output(sizes,
         Binary(sizes, OpCode::kAdd, Param(sizes, S(F32, {2}), 0), Param(sizes, S(F32, {3}), 1)));
  expect_invalid(sizes, {Vec(F32, {1, 2}), Vec(F32, {1, 2, 3})});
}

// ---------------------------------------------------------------------------------------
// Randomised properties (the seed is in every failure message).

// Returns a fresh seed, printed so that any run can be replayed.
uint64_t LoggedSeed() {
  const uint64_t seed = std::random_device{}();
  std::cout << "random seed: " << seed << std::endl;
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

TEST(InterpreterProperties, ReduceSumEqualsSumOfSlices) {
  const uint64_t seed = LoggedSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 20; ++iter) {
    const std::vector<int64_t> dims = {1 + static_cast<int64_t>(rng() % 5),
                                       1 + static_cast<int64_t>(rng() % 5),
                                       1 + static_cast<int64_t>(rng() % 5)};
    const int64_t d = static_cast<int64_t>(rng() % 3);
    Graph g;
    const int x = Param(g, S(S64, dims), 0);
    Output(g, Reduce(g, x, ConstI(g, S(S64), {0}), {d}, ReduceKind::kSum));
    // The same sum as an explicit chain of adds of size-1 slices, reshaped away.
    std::vector<int64_t> kept;
    for (int k = 0; k < 3; ++k) {
      if (k != d) kept.push_back(dims[k]);
    }
    int acc = -1;
    for (int64_t s = 0; s < dims[d]; ++s) {
      std::vector<int64_t> start = {0, 0, 0}, limit = dims;
      start[d] = s;
      limit[d] = s + 1;
      const int slice = Reshape(g, Slice(g, x, start, limit), kept);
      acc = acc < 0 ? slice : Binary(g, OpCode::kAdd, acc, slice);
    }
    Output(g, acc);
    std::mt19937_64 data_rng(rng());
    const std::vector<Tensor> out = EvalAll(g, {RandomTensor(S(S64, dims), data_rng)});
    EXPECT_EQ(out[0].i, out[1].i);
  }
}

TEST(InterpreterProperties, InversePermutationsAndDoubleReverseAreIdentity) {
  const uint64_t seed = LoggedSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 20; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    std::vector<int64_t> dims, perm(rank);
    for (int k = 0; k < rank; ++k) dims.push_back(1 + static_cast<int64_t>(rng() % 4));
    for (int k = 0; k < rank; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int64_t> inverse(rank);
    for (int k = 0; k < rank; ++k) inverse[perm[k]] = k;
    std::vector<int64_t> rev_dims;
    for (int k = 0; k < rank; ++k) {
      if (rng() % 2) rev_dims.push_back(k);
    }
    Graph g;
    const int x = Param(g, S(F32, dims), 0);
    Output(g, Transpose(g, Transpose(g, x, perm), inverse));
    Output(g, Reverse(g, Reverse(g, x, rev_dims), rev_dims));
    const Tensor in = RandomTensor(S(F32, dims), rng);
    const std::vector<Tensor> out = EvalAll(g, {in});
    EXPECT_EQ(out[0].f, in.f);
    EXPECT_EQ(out[1].f, in.f);
  }
}

TEST(InterpreterProperties, LargeTensorsAreFast) {
  // 2^20 elements through a transpose, a broadcast and a reduce: a guard against accidental
  // per-element allocation or quadratic index mapping.
  const int64_t r = 1024, c = 1024;
  Graph g;
  const int x = Param(g, S(F32, {r, c}), 0);
  const int t = Transpose(g, x, {1, 0});
  const int sum = Reduce(g, t, ConstF(g, S(F32), {0}), {0}, ReduceKind::kSum);
  Output(g, Binary(g, OpCode::kSub, t, Broadcast(g, sum, {c, r}, {1})));
  std::mt19937_64 rng(1);
  const Tensor out = Eval1(g, {RandomTensor(S(F32, {r, c}), rng)});
  EXPECT_EQ(out.size(), r * c);
}

}  // namespace
}  // namespace stitch
