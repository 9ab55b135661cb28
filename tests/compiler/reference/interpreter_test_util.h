// Helpers shared by the reference interpreter's tests: tensors written inline, and graphs of
// one op evaluated on them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "stitch/reference/interpreter.h"
#include "support/graph_builder.h"

namespace stitch::testing {

inline Shape S(DType t, std::vector<int64_t> dims = {}) { return Shape{t, std::move(dims)}; }

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr DType F32 = DType::kF32, F64 = DType::kF64, F16 = DType::kF16, BF16 = DType::kBF16,
                       S8 = DType::kS8, S32 = DType::kS32, S64 = DType::kS64, U8 = DType::kU8,
                       U32 = DType::kU32, U64 = DType::kU64, PRED = DType::kPred;

inline Tensor F(Shape s, std::vector<double> v) {
  Tensor t;
  t.shape = std::move(s);
  t.f = std::move(v);
  return t;
}

inline Tensor I(Shape s, std::vector<int64_t> v) {
  Tensor t;
  t.shape = std::move(s);
  t.i = std::move(v);
  return t;
}

// A 1-D tensor of dtype `t` holding `v` (floats or integers by dtype).
inline Tensor Vec(DType t, std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  if (IsFloat(t)) return F(S(t, {n}), std::move(v));
  std::vector<int64_t> iv;
  for (double x : v) iv.push_back(static_cast<int64_t>(x));
  return I(S(t, {n}), std::move(iv));
}

inline std::vector<Tensor> EvalAll(const Graph& g, const std::vector<Tensor>& params) {
  StatusOr<std::vector<Tensor>> r = Evaluate(g, params);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<Tensor>(g.outputs.size());
}

inline Tensor Eval1(const Graph& g, const std::vector<Tensor>& params) {
  return EvalAll(g, params)[0];
}

// op(x) on a parameter x.
inline Tensor RunUnary(OpCode op, const Tensor& x) {
  Graph g;
  Output(g, Unary(g, op, Param(g, x.shape, 0)));
  return Eval1(g, {x});
}

inline Tensor RunBin(OpCode op, const Tensor& a, const Tensor& b) {
  Graph g;
  Output(g, Binary(g, op, Param(g, a.shape, 0), Param(g, b.shape, 1)));
  return Eval1(g, {a, b});
}

inline Tensor RunCompare(CompareDirection d, const Tensor& a, const Tensor& b) {
  Graph g;
  Output(g, Compare(g, d, Param(g, a.shape, 0), Param(g, b.shape, 1)));
  return Eval1(g, {a, b});
}

inline Tensor RunConvert(const Tensor& x, DType to, bool bitcast = false) {
  Graph g;
  const int p = Param(g, x.shape, 0);
  Output(g, bitcast ? BitcastConvert(g, p, to) : Convert(g, p, to));
  return Eval1(g, {x});
}

// Compares float vectors bit for bit in value (NaN equals NaN; -0 differs from +0).
inline void ExpectSameFloats(const std::vector<double>& got, const std::vector<double>& want) {
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

inline std::vector<double> Range(int64_t n, double scale = 1.0) {
  std::vector<double> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<double>(k) * scale;
  return v;
}

}  // namespace stitch::testing
