// Tests of the reference interpreter against hand-computed values and independent formulas:
// data movement, leaves, reduce, whole graphs, argument checks and randomised properties.
// interpreter_test.cc tests the elementwise ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "interpreter_test_util.h"
#include "stitch/reference/interpreter.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): stitch::testing builders

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
