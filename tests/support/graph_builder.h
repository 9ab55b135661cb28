// Helpers for building graphs by hand in tests. Each appends one node and returns its
// index; shapes are inferred where the op determines them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "stitch/compiler/graph.h"

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

}  // namespace stitch::testing
