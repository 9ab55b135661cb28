// Helpers for building graphs by hand in tests. Each appends one node and returns its
// index; shapes are inferred where the op determines them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "stitch/ir/graph.h"

namespace stitch::testing {

inline int Param(Graph& g, Shape shape, int64_t number, std::string name = "") {
  Node n;
  n.op = OpCode::kParameter;
  n.shape = std::move(shape);
  n.parameter_number = number;
  n.name = name.empty() ? "p" + std::to_string(number) : std::move(name);
  return g.Add(std::move(n));
}

inline int ConstScalar(Graph& g, DType t, double v) {
  Node n;
  n.op = OpCode::kConstant;
  n.shape = {t, {}};
  if (IsFloat(t)) {
    n.literal.f = {v};
  } else {
    n.literal.i = {static_cast<int64_t>(v)};
  }
  return g.Add(std::move(n));
}

inline int Unary(Graph& g, OpCode op, int x) {
  Node n;
  n.op = op;
  n.shape = g.nodes[x].shape;
  if (op == OpCode::kIsFinite) n.shape.dtype = DType::kPred;
  n.operands = {x};
  return g.Add(std::move(n));
}

inline int Convert(Graph& g, int x, DType to) {
  Node n;
  n.op = OpCode::kConvert;
  n.shape = {to, g.nodes[x].shape.dims};
  n.operands = {x};
  return g.Add(std::move(n));
}

inline int Binary(Graph& g, OpCode op, int a, int b) {
  Node n;
  n.op = op;
  n.shape = g.nodes[a].shape;
  n.operands = {a, b};
  return g.Add(std::move(n));
}

inline int Compare(Graph& g, CompareDirection d, int a, int b) {
  Node n;
  n.op = OpCode::kCompare;
  n.shape = {DType::kPred, g.nodes[a].shape.dims};
  n.direction = d;
  n.operands = {a, b};
  return g.Add(std::move(n));
}

inline int Select(Graph& g, int p, int a, int b) {
  Node n;
  n.op = OpCode::kSelect;
  n.shape = g.nodes[a].shape;
  n.operands = {p, a, b};
  return g.Add(std::move(n));
}

inline int Broadcast(Graph& g, int x, std::vector<int64_t> out_dims, std::vector<int64_t> map) {
  Node n;
  n.op = OpCode::kBroadcast;
  n.shape = {g.nodes[x].shape.dtype, std::move(out_dims)};
  n.dimensions = std::move(map);
  n.operands = {x};
  return g.Add(std::move(n));
}

inline int Reshape(Graph& g, int x, std::vector<int64_t> dims) {
  Node n;
  n.op = OpCode::kReshape;
  n.shape = {g.nodes[x].shape.dtype, std::move(dims)};
  n.operands = {x};
  return g.Add(std::move(n));
}

inline int Transpose(Graph& g, int x, std::vector<int64_t> perm) {
  Node n;
  n.op = OpCode::kTranspose;
  n.shape.dtype = g.nodes[x].shape.dtype;
  for (int64_t p : perm) n.shape.dims.push_back(g.nodes[x].shape.dims[p]);
  n.dimensions = std::move(perm);
  n.operands = {x};
  return g.Add(std::move(n));
}

inline int Reduce(Graph& g, int x, int init, std::vector<int64_t> dims, ReduceKind kind) {
  Node n;
  n.op = OpCode::kReduce;
  n.shape.dtype = g.nodes[x].shape.dtype;
  const auto& in = g.nodes[x].shape.dims;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool reduced = false;
    for (int64_t r : dims) reduced = reduced || r == d;
    if (!reduced) n.shape.dims.push_back(in[d]);
  }
  n.dimensions = std::move(dims);
  n.reduce_kind = kind;
  n.operands = {x, init};
  return g.Add(std::move(n));
}

// Float constant of `shape` holding `values` (a single value is a splat).
inline int ConstF(Graph& g, Shape shape, std::vector<double> values) {
  Node n;
  n.op = OpCode::kConstant;
  n.shape = std::move(shape);
  n.literal.f = std::move(values);
  return g.Add(std::move(n));
}

// Integer or pred constant of `shape` holding `values` (a single value is a splat; u64
// values by bit pattern).
inline int ConstI(Graph& g, Shape shape, std::vector<int64_t> values) {
  Node n;
  n.op = OpCode::kConstant;
  n.shape = std::move(shape);
  n.literal.i = std::move(values);
  return g.Add(std::move(n));
}

inline int BitcastConvert(Graph& g, int x, DType to) {
  Node n;
  n.op = OpCode::kBitcastConvert;
  n.shape = {to, g.nodes[x].shape.dims};
  n.operands = {x};
  return g.Add(std::move(n));
}

// clamp(lo, x, hi); the result has x's shape.
inline int Clamp(Graph& g, int lo, int x, int hi) {
  Node n;
  n.op = OpCode::kClamp;
  n.shape = g.nodes[x].shape;
  n.operands = {lo, x, hi};
  return g.Add(std::move(n));
}

// Slice with per-dimension start/limit and strides (default 1).
inline int Slice(Graph& g, int x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                 std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides.assign(starts.size(), 1);
  Node n;
  n.op = OpCode::kSlice;
  n.shape.dtype = g.nodes[x].shape.dtype;
  for (size_t d = 0; d < starts.size(); ++d) {
    n.shape.dims.push_back((limits[d] - starts[d] + strides[d] - 1) / strides[d]);
  }
  n.slice_starts = std::move(starts);
  n.slice_limits = std::move(limits);
  n.slice_strides = std::move(strides);
  n.operands = {x};
  return g.Add(std::move(n));
}

// Concatenation of `xs` along `dim`.
inline int Concat(Graph& g, std::vector<int> xs, int64_t dim) {
  Node n;
  n.op = OpCode::kConcatenate;
  n.shape = g.nodes[xs[0]].shape;
  n.shape.dims[dim] = 0;
  for (int x : xs) n.shape.dims[dim] += g.nodes[x].shape.dims[dim];
  n.dimensions = {dim};
  n.operands = std::move(xs);
  return g.Add(std::move(n));
}

// Pads x with the scalar node `value`; interior defaults to 0; low/high may be negative.
inline int Pad(Graph& g, int x, int value, std::vector<int64_t> low, std::vector<int64_t> high,
               std::vector<int64_t> interior = {}) {
  if (interior.empty()) interior.assign(low.size(), 0);
  Node n;
  n.op = OpCode::kPad;
  n.shape = g.nodes[x].shape;
  for (size_t d = 0; d < low.size(); ++d) {
    const int64_t size = n.shape.dims[d];
    n.shape.dims[d] = low[d] + high[d] + size + (size > 0 ? (size - 1) * interior[d] : 0);
  }
  n.pad_low = std::move(low);
  n.pad_high = std::move(high);
  n.pad_interior = std::move(interior);
  n.operands = {x, value};
  return g.Add(std::move(n));
}

inline int Reverse(Graph& g, int x, std::vector<int64_t> dims) {
  Node n;
  n.op = OpCode::kReverse;
  n.shape = g.nodes[x].shape;
  n.dimensions = std::move(dims);
  n.operands = {x};
  return g.Add(std::move(n));
}

inline int Iota(Graph& g, Shape shape, int64_t dim) {
  Node n;
  n.op = OpCode::kIota;
  n.shape = std::move(shape);
  n.dimensions = {dim};
  return g.Add(std::move(n));
}

// rng-uniform of `shape` (a float dtype) seeded by the u64 scalar node `seed`.
inline int RngUniform(Graph& g, int seed, Shape shape, int64_t stream = 0) {
  Node n;
  n.op = OpCode::kRngUniform;
  n.shape = std::move(shape);
  n.rng_stream = stream;
  n.operands = {seed};
  return g.Add(std::move(n));
}

// Appends x to the graph's outputs and returns it.
inline int Output(Graph& g, int x) {
  g.outputs.push_back(x);
  return x;
}

// Softmax over the last dimension of a rank-2 f32 parameter: the classic three-kernel
// case for XLA-style fusion. Returns the graph with one output.
inline Graph Softmax(int64_t rows, int64_t cols, DType t = DType::kF32) {
  Graph g;
  g.name = "softmax";
  int x = Param(g, {t, {rows, cols}}, 0, "x");
  int xf = t == DType::kF32 ? x : Convert(g, x, DType::kF32);
  int ninf = ConstScalar(g, DType::kF32, -1e30);
  int zero = ConstScalar(g, DType::kF32, 0);
  int mx = Reduce(g, xf, ninf, {1}, ReduceKind::kMax);
  int mxb = Broadcast(g, mx, {rows, cols}, {0});
  int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, xf, mxb));
  int s = Reduce(g, e, zero, {1}, ReduceKind::kSum);
  int out = Binary(g, OpCode::kDiv, e, Broadcast(g, s, {rows, cols}, {0}));
  g.outputs = {t == DType::kF32 ? out : Convert(g, out, t)};
  return g;
}

// The batch-norm statistics of x[rows, cols] over its rows: the centred values x - mean and
// the column variance. The variance reads the mean of every row, so the plan needs a grid
// barrier between the two column reductions: a global_stitch kernel.
inline Graph BatchNormStatistics(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "bn_statistics";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int zero = ConstScalar(g, DType::kF32, 0);
  int inv_rows = Broadcast(g, ConstScalar(g, DType::kF32, 1.0 / rows), {cols}, {});
  int mean = Binary(g, OpCode::kMul, Reduce(g, x, zero, {0}, ReduceKind::kSum), inv_rows);
  int centred = Binary(g, OpCode::kSub, x, Broadcast(g, mean, {rows, cols}, {1}));
  int square = Binary(g, OpCode::kMul, centred, centred);
  int var = Binary(g, OpCode::kMul, Reduce(g, square, zero, {0}, ReduceKind::kSum), inv_rows);
  g.outputs = {centred, var};
  return g;
}

}  // namespace stitch::testing
