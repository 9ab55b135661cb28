#include "stitch/reference/tensor_compare.h"

#include <algorithm>
#include <cmath>

namespace stitch {

double DefaultTolerance(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16:
      return 1e-2;
    case DType::kF32:
    case DType::kF64:
      return 1e-5;
    default:
      return 0;
  }
}

namespace {

// The most input elements any reduce of `g` folds into one output element.
int64_t LongestReduction(const Graph& g) {
  int64_t longest = 0;
  for (const Node& n : g.nodes) {
    if (n.op != OpCode::kReduce) continue;
    const int64_t out = std::max<int64_t>(n.shape.elements(), 1);
    longest = std::max(longest, g.nodes[n.operands[0]].shape.elements() / out);
  }
  return longest;
}

}  // namespace

double OutputTolerance(const Graph& g, DType t) {
  const bool long_f32_sum = t == DType::kF32 && LongestReduction(g) > 1024;
  return DefaultTolerance(t) * (long_f32_sum ? 4 : 1);
}

Comparison Compare(const Tensor& expected, const Tensor& actual, double tolerance) {
  Comparison c;
  if (expected.shape != actual.shape) {
    c.pass = false;
    c.message =
        "shape " + actual.shape.ToString() + " differs from expected " + expected.shape.ToString();
    return c;
  }
  const int64_t n = expected.size();
  double sum_squares = 0;
  int64_t finite = 0;
  for (int64_t k = 0; k < n; ++k) {
    double e = expected.AsDouble(k);
    if (std::isfinite(e)) {
      sum_squares += e * e;
      ++finite;
    }
  }
  const double floor = std::max(1.0, finite ? std::sqrt(sum_squares / finite) : 0.0);
  for (int64_t k = 0; k < n; ++k) {
    double e = expected.AsDouble(k), a = actual.AsDouble(k);
    double abs_err = 0;
    if (std::isnan(e) || std::isnan(a)) {
      abs_err = std::isnan(e) && std::isnan(a) ? 0 : INFINITY;
    } else if (std::isinf(e) || std::isinf(a)) {
      abs_err = e == a ? 0 : INFINITY;
    } else {
      abs_err = std::fabs(a - e);
    }
    double rel_err = abs_err / std::max(std::fabs(std::isfinite(e) ? e : 0.0), floor);
    c.max_abs_error = std::max(c.max_abs_error, abs_err);
    c.max_rel_error = std::max(c.max_rel_error, rel_err);
    if (rel_err > tolerance) {
      if (c.first_mismatch < 0) {
        c.first_mismatch = k;
        c.message = "element " + std::to_string(k) + ": got " + std::to_string(a) + ", expected " +
                    std::to_string(e);
      }
      ++c.mismatches;
    }
  }
  c.pass = c.mismatches == 0;
  return c;
}

}  // namespace stitch
