#include "stitch/reference/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "numeric.h"

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

namespace {

// Compare's loops over `n` element values, read through `expected(k)` and `actual(k)`: the
// float vectors themselves for float tensors (the common case), the integer conversion
// otherwise, or decoded from device bytes as they are read (full-size GPU outputs, which
// would double their size as tensors of doubles).
template <typename Expected, typename Actual>
Comparison CompareValues(int64_t n, Expected expected, Actual actual, double tolerance) {
  Comparison c;
  double sum_squares = 0;
  int64_t finite = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double e = expected(k);
    if (std::isfinite(e)) {
      sum_squares += e * e;
      ++finite;
    }
  }
  const double floor = std::max(1.0, finite ? std::sqrt(sum_squares / finite) : 0.0);
  for (int64_t k = 0; k < n; ++k) {
    const double e = expected(k), a = actual(k);
    double abs_err = 0;
    if (std::isnan(e) || std::isnan(a)) {
      abs_err = std::isnan(e) && std::isnan(a) ? 0 : INFINITY;
    } else if (std::isinf(e) || std::isinf(a)) {
      abs_err = e == a ? 0 : INFINITY;
    } else {
      abs_err = std::fabs(a - e);
    }
    const double rel_err = abs_err / std::max(std::fabs(std::isfinite(e) ? e : 0.0), floor);
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

// Element `k` of device storage `bytes` of `shape`'s dtype, as a double (FromDeviceBytes's
// value of it).
double DeviceValue(const Shape& shape, int width, const std::vector<uint8_t>& bytes, int64_t k) {
  uint64_t bits = 0;
  std::memcpy(&bits, bytes.data() + k * width, width);  // little-endian, as tensor.cc asserts
  if (IsFloat(shape.dtype)) return internal::BitsToFloat(bits, shape.dtype);
  if (shape.dtype == DType::kPred) return bits != 0 ? 1.0 : 0.0;
  const int64_t v = internal::WrapInt(static_cast<int64_t>(bits), shape.dtype);
  return shape.dtype == DType::kU64 ? static_cast<double>(static_cast<uint64_t>(v))
                                    : static_cast<double>(v);
}

}  // namespace

Comparison Compare(const Tensor& expected, const Tensor& actual, double tolerance) {
  if (expected.shape != actual.shape) {
    Comparison c;
    c.pass = false;
    c.message =
        "shape " + actual.shape.ToString() + " differs from expected " + expected.shape.ToString();
    return c;
  }
  const int64_t n = expected.size();
  const bool dense_floats = IsFloat(expected.shape.dtype) &&
                            static_cast<int64_t>(expected.f.size()) == n &&
                            static_cast<int64_t>(actual.f.size()) == n;
  if (dense_floats) {
    return CompareValues(
        n, [&](int64_t k) { return expected.f[k]; }, [&](int64_t k) { return actual.f[k]; },
        tolerance);
  }
  return CompareValues(
      n, [&](int64_t k) { return expected.AsDouble(k); },
      [&](int64_t k) { return actual.AsDouble(k); }, tolerance);
}

Comparison CompareDeviceBytes(const Shape& shape, const std::vector<uint8_t>& expected,
                              const std::vector<uint8_t>& actual, double tolerance) {
  const int width = DTypeBytes(shape.dtype);
  const auto want = static_cast<size_t>(shape.elements()) * static_cast<size_t>(width);
  if (width == 0 || expected.size() != want || actual.size() != want) {
    Comparison c;
    c.pass = false;
    c.message = shape.ToString() + " needs " + std::to_string(want) + " bytes; got " +
                std::to_string(actual.size()) + ", expected " + std::to_string(expected.size());
    return c;
  }
  if (expected == actual) {  // the same bits: no element can differ
    Comparison same;
    same.pass = true;
    return same;
  }
  return CompareValues(
      shape.elements(), [&](int64_t k) { return DeviceValue(shape, width, expected, k); },
      [&](int64_t k) { return DeviceValue(shape, width, actual, k); }, tolerance);
}

}  // namespace stitch
