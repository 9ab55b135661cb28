// The reference interpreter's data-movement ops. All but concatenate and pad are gathers:
// each output element reads the operand at an affine function of its index.
#include <algorithm>
#include <vector>

#include "interpreter_internal.h"

namespace stitch::interp {
namespace {

// Calls fn(k, idx) for every multi-index idx of `dims` in row-major order, k its linear index.
template <typename Fn>
void ForEachIndex(const std::vector<int64_t>& dims, Fn fn) {
  const int64_t n = Product(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(k, idx);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

// Returns a tensor of `shape` with out[k] = in[base + sum j[d] * step[d]] (j the output
// multi-index): transpose, broadcast, slice and reverse are all such gathers.
Tensor Gather(const Tensor& in, const Shape& shape, int64_t base,
              const std::vector<int64_t>& step) {
  Tensor out = Tensor::Zeros(shape);
  WithData(in, out, [&](const auto& src, auto& dst) {
    ForEachAffine(shape.dims, base, step, [&](int64_t k, int64_t off) { dst[k] = src[off]; });
  });
  return out;
}

Tensor EvalBroadcast(const Node& n, const Tensor& in) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape.dims);
  std::vector<int64_t> step(n.shape.rank(), 0);  // output dims not mapped repeat the operand
  for (size_t i = 0; i < n.dimensions.size(); ++i) step[n.dimensions[i]] = in_strides[i];
  return Gather(in, n.shape, 0, step);
}

Tensor EvalReshape(const Node& n, const Tensor& in) {
  Tensor out = in;
  out.shape = n.shape;
  return out;
}

Tensor EvalTranspose(const Node& n, const Tensor& in) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape.dims);
  std::vector<int64_t> step(n.shape.rank());
  for (int i = 0; i < n.shape.rank(); ++i) step[i] = in_strides[n.dimensions[i]];
  return Gather(in, n.shape, 0, step);
}

Tensor EvalSlice(const Node& n, const Tensor& in) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape.dims);
  int64_t base = 0;
  std::vector<int64_t> step(n.shape.rank());
  for (int d = 0; d < n.shape.rank(); ++d) {
    base += n.slice_starts[d] * in_strides[d];
    step[d] = n.slice_strides[d] * in_strides[d];
  }
  return Gather(in, n.shape, base, step);
}

Tensor EvalReverse(const Node& n, const Tensor& in) {
  std::vector<int64_t> step = RowMajorStrides(in.shape.dims);
  int64_t base = 0;
  for (int64_t d : n.dimensions) {
    base += (in.shape.dims[d] - 1) * step[d];
    step[d] = -step[d];
  }
  return Gather(in, n.shape, base, step);
}

Tensor EvalConcatenate(const Node& n, const std::vector<const Tensor*>& ins) {
  // View every tensor as [outer, dim * inner]: each operand contributes one contiguous run
  // per outer index.
  const int axis = static_cast<int>(n.dimensions[0]);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= n.shape.dims[d];
  for (int d = axis + 1; d < n.shape.rank(); ++d) inner *= n.shape.dims[d];
  const int64_t out_row = n.shape.dims[axis] * inner;
  Tensor out = Tensor::Zeros(n.shape);
  int64_t column = 0;
  for (const Tensor* in : ins) {
    const int64_t run = in->shape.dims[axis] * inner;
    WithData(*in, out, [&](const auto& src, auto& dst) {
      for (int64_t o = 0; o < outer; ++o) {
        std::copy_n(src.begin() + o * run, run, dst.begin() + o * out_row + column);
      }
    });
    column += run;
  }
  return out;
}

Tensor EvalPad(const Node& n, const Tensor& in, const Tensor& pad_value) {
  Tensor out = Tensor::Zeros(n.shape);
  const std::vector<int64_t> out_strides = RowMajorStrides(n.shape.dims);
  const int rank = n.shape.rank();
  WithData(in, out, [&](const auto& src, auto& dst) {
    std::fill(dst.begin(), dst.end(), SameKind(pad_value, src)[0]);
    // Operand element j lands at low + j * (interior + 1) in each dimension; negative low or
    // high crop whatever lands outside the output.
    ForEachIndex(in.shape.dims, [&](int64_t k, const std::vector<int64_t>& j) {
      int64_t offset = 0;
      for (int d = 0; d < rank; ++d) {
        const int64_t p = n.pad_low[d] + j[d] * (n.pad_interior[d] + 1);
        if (p < 0 || p >= n.shape.dims[d]) return;
        offset += p * out_strides[d];
      }
      dst[offset] = src[k];
    });
  });
  return out;
}

}  // namespace

StatusOr<Tensor> EvalDataMovement(const Graph& g, int id, const std::vector<const Tensor*>& ins) {
  const Node& n = g.nodes[id];
  switch (n.op) {
    case OpCode::kBroadcast:
      return EvalBroadcast(n, *ins[0]);
    case OpCode::kReshape:
      return EvalReshape(n, *ins[0]);
    case OpCode::kTranspose:
      return EvalTranspose(n, *ins[0]);
    case OpCode::kSlice:
      return EvalSlice(n, *ins[0]);
    case OpCode::kConcatenate:
      return EvalConcatenate(n, ins);
    case OpCode::kPad:
      return EvalPad(n, *ins[0], *ins[1]);
    case OpCode::kReverse:
      return EvalReverse(n, *ins[0]);
    default:
      return NotHandled(g, id);
  }
}

}  // namespace stitch::interp
