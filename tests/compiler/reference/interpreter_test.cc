// Tests of the reference interpreter against hand-computed values and independent formulas:
// Philox and rng-uniform, the elementwise ops and conversions. interpreter_data_movement_test.cc
// tests the other ops, whole graphs and argument checks.
#include "stitch/reference/interpreter.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "interpreter_test_util.h"
#include "stitch/ir/philox.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): stitch::testing builders

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
    // Word k % 4 of the evaluation for block k / 4.
    const PhiloxCounter ctr = {static_cast<uint32_t>(k / 4), 0, 7, 0};
    const uint32_t w = Philox4x32_10(ctr, {0x89abcdef, 0x01234567})[k % 4];
    const double want = static_cast<double>(w >> 8) / 16777216.0;
    EXPECT_EQ(out[0].f[k], want) << k;
    EXPECT_GE(out[0].f[k], 0.0);
    EXPECT_LT(out[0].f[k], 1.0);
    EXPECT_NE(out[1].f[k], out[0].f[k]) << "streams must differ at " << k;
    EXPECT_EQ(out[2].f[k], RoundToDType(want, F16)) << k;
  }
  // The counter's second word carries bits 32..63 of the block.
  EXPECT_EQ(RngUniformBits(seed, (uint64_t{1} << 34) + 2, 7),
            Philox4x32_10({0, 1, 7, 0}, {0x89abcdef, 0x01234567})[2]);
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

}  // namespace
}  // namespace stitch
