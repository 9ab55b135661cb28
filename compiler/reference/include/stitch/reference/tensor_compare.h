// Comparing a kernel's output with the reference interpreter's.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stitch/reference/tensor.h"

namespace stitch {

// The tolerance kernels are held to, by output dtype: 1e-5 for f32 and f64 (kernels
// reassociate reductions, so bit-exactness is not expected), 1e-2 for f16 and bf16, 0 for
// integers and pred.
double DefaultTolerance(DType t);

// The tolerance an output of dtype `t` of graph `g` is held to: DefaultTolerance, times 4
// for f32 outputs of graphs with a reduce that folds more than 1024 inputs into one value.
// The interpreter sums in double and a kernel sums f32 in its own order; over thousands of
// terms that alone moves a result past 1e-5 (the 2048-row column sums of the GPT-2
// layer-norm backward reach 2.3e-5).
double OutputTolerance(const Graph& g, DType t);

struct Comparison {
  bool pass = true;
  double max_abs_error = 0;
  // Largest |actual - expected| / max(|expected|, rms(expected), 1): relative for large
  // values, and measured against the tensor's typical magnitude near zero, where
  // cancellation makes relative error meaningless (a float sum's rounding error scales with
  // the magnitude of its terms, not of its result).
  double max_rel_error = 0;
  int64_t mismatches = 0;
  int64_t first_mismatch = -1;  // linear index, or -1
  std::string message;          // names the first mismatch, empty when passing
};

// Compares element by element. NaN equals NaN, infinities must match exactly, and a shape
// or dtype difference fails. Passing means every error is within `tolerance`.
Comparison Compare(const Tensor& expected, const Tensor& actual, double tolerance);

// As Compare, on two outputs of `shape` given in device storage bytes (ToDeviceBytes), read
// in place: a GPU run's full-size outputs are never widened to tensors of doubles, and
// identical bytes pass at once. Fails, naming the sizes, when either has another byte count
// than `shape` needs.
Comparison CompareDeviceBytes(const Shape& shape, const std::vector<uint8_t>& expected,
                              const std::vector<uint8_t>& actual, double tolerance);

}  // namespace stitch
