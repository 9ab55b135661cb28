// What the reference interpreter's files share: error helpers, the value vectors of a tensor,
// index iteration, and the ops each file evaluates. Internal to interpreter*.cc.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/reference/tensor.h"

namespace stitch::interp {

// Returns INVALID_ARGUMENT "node <id> '<name>': <why>".
Status NodeError(const Graph& g, int id, const std::string& why);

// Returns the error for node `id`'s op applied to dtype `t`, for which it is not defined.
Status NotDefined(const Graph& g, int id, DType t);

// Returns the error for a node whose op the interpreter has no evaluation for.
Status NotHandled(const Graph& g, int id);

// Returns the row-major strides of `dims`, in elements.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims);

// Returns the number of elements of `dims`.
inline int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Calls fn(k, offset) for every multi-index j of `dims` in row-major order, with
// offset = base + sum_d j[d] * step[d] maintained incrementally (no per-element division).
template <typename Fn>
void ForEachAffine(const std::vector<int64_t>& dims, int64_t base, const std::vector<int64_t>& step,
                   Fn fn) {
  const int64_t n = Product(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t offset = base;
  for (int64_t k = 0; k < n; ++k) {
    fn(k, offset);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) {
        offset += step[d];
        break;
      }
      offset -= step[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// The value vector of `t` that holds elements of type V (double: f, int64_t: i).
inline std::vector<double>& Values(Tensor& t, double*) { return t.f; }
inline std::vector<int64_t>& Values(Tensor& t, int64_t*) { return t.i; }
inline const std::vector<double>& Values(const Tensor& t, double*) { return t.f; }
inline const std::vector<int64_t>& Values(const Tensor& t, int64_t*) { return t.i; }

// The value vector of `t` whose element type matches that of vector `like`.
template <typename Vec>
const Vec& SameKind(const Tensor& t, const Vec& like) {
  return Values(t, static_cast<typename Vec::value_type*>(nullptr));
}

// Applies fn to the vector of `in` that holds its values and the matching vector of `out`.
template <typename Fn>
void WithData(const Tensor& in, Tensor& out, Fn fn) {
  if (IsFloat(in.shape.dtype)) {
    fn(in.f, out.f);
  } else {
    fn(in.i, out.i);
  }
}

// NaN-propagating max and min; between zeros of opposite sign, max prefers +0 and min -0.
double FMax(double a, double b);
double FMin(double a, double b);

// Signed or unsigned "less than" of two normalised integers of dtype t.
inline bool IntLess(int64_t u, int64_t v, bool is_unsigned) {
  return is_unsigned ? static_cast<uint64_t>(u) < static_cast<uint64_t>(v) : u < v;
}

// Evaluates elementwise node `id` on its operand tensors `ins` (interpreter_elementwise.cc).
StatusOr<Tensor> EvalElementwise(const Graph& g, int id, const std::vector<const Tensor*>& ins);

// Evaluates data-movement node `id` on its operand tensors `ins`
// (interpreter_data_movement.cc).
StatusOr<Tensor> EvalDataMovement(const Graph& g, int id, const std::vector<const Tensor*>& ins);

}  // namespace stitch::interp
