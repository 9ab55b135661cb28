#include "suite/ops.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace stitch::suite {

int Builder::Append(Node n) {
  // Names only make dumps and verifier messages readable; they are not part of the key.
  n.name = std::string(OpCodeName(n.op)) + "." + std::to_string(g_.nodes.size());
  return g_.Add(std::move(n));
}

int Builder::Param(DType t, Dims dims, std::string name) {
  Node n;
  n.op = OpCode::kParameter;
  n.shape = {t, std::move(dims)};
  n.parameter_number = params_++;
  int id = Append(std::move(n));
  g_.nodes[id].name = std::move(name);
  return id;
}

int Builder::Scalar(DType t, double v) {
  if (!IsFloat(t)) return ScalarBits(t, static_cast<int64_t>(v));
  Node n;
  n.op = OpCode::kConstant;
  n.shape = {t, {}};
  n.literal.f = {v};
  return Append(std::move(n));
}

int Builder::ScalarBits(DType t, int64_t bits) {
  Node n;
  n.op = OpCode::kConstant;
  n.shape = {t, {}};
  n.literal.i = {bits};
  return Append(std::move(n));
}

int Builder::Splat(int like, double v) { return Broadcast(Scalar(dtype(like), v), dims(like), {}); }

int Builder::SplatBits(int like, int64_t bits) {
  return Broadcast(ScalarBits(dtype(like), bits), dims(like), {});
}

int Builder::Iota(DType t, Dims dims, int64_t dim) {
  Node n;
  n.op = OpCode::kIota;
  n.shape = {t, std::move(dims)};
  n.dimensions = {dim};
  return Append(std::move(n));
}

int Builder::RngUniform(int seed, DType t, Dims dims, int64_t stream) {
  Node n;
  n.op = OpCode::kRngUniform;
  n.shape = {t, std::move(dims)};
  n.operands = {seed};
  n.rng_stream = stream;
  return Append(std::move(n));
}

int Builder::Unary(OpCode op, int x) {
  Node n;
  n.op = op;
  n.shape = shape(x);
  n.operands = {x};
  return Append(std::move(n));
}

int Builder::Binary(OpCode op, int a, int b) {
  Node n;
  n.op = op;
  n.shape = shape(a);
  n.operands = {a, b};
  return Append(std::move(n));
}

int Builder::Cmp(CompareDirection d, int a, int b) {
  Node n;
  n.op = OpCode::kCompare;
  n.shape = {DType::kPred, dims(a)};
  n.direction = d;
  n.operands = {a, b};
  return Append(std::move(n));
}

int Builder::Select(int p, int a, int b) {
  Node n;
  n.op = OpCode::kSelect;
  n.shape = shape(a);
  n.operands = {p, a, b};
  return Append(std::move(n));
}

int Builder::Convert(int x, DType t) {
  if (dtype(x) == t) return x;
  Node n;
  n.op = OpCode::kConvert;
  n.shape = {t, dims(x)};
  n.operands = {x};
  return Append(std::move(n));
}

int Builder::BitcastConvert(int x, DType t) {
  Node n;
  n.op = OpCode::kBitcastConvert;
  n.shape = {t, dims(x)};
  n.operands = {x};
  return Append(std::move(n));
}

int Builder::Broadcast(int x, Dims out, Dims map) {
  Node n;
  n.op = OpCode::kBroadcast;
  n.shape = {dtype(x), std::move(out)};
  n.dimensions = std::move(map);
  n.operands = {x};
  return Append(std::move(n));
}

int Builder::Reshape(int x, Dims dims) {
  Node n;
  n.op = OpCode::kReshape;
  n.shape = {dtype(x), std::move(dims)};
  n.operands = {x};
  return Append(std::move(n));
}

int Builder::Transpose(int x, Dims perm) {
  Node n;
  n.op = OpCode::kTranspose;
  n.shape.dtype = dtype(x);
  for (int64_t p : perm) n.shape.dims.push_back(dims(x)[p]);
  n.dimensions = std::move(perm);
  n.operands = {x};
  return Append(std::move(n));
}

int Builder::Reduce(int x, ReduceKind kind, Dims reduced) {
  const DType t = dtype(x);
  int init = -1;
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kOr:
      init = Scalar(t, 0);
      break;
    case ReduceKind::kProd:
    case ReduceKind::kAnd:
      init = Scalar(t, 1);
      break;
    case ReduceKind::kMax:
      init = Scalar(t, IsFloat(t) ? -std::numeric_limits<double>::infinity() : 0);
      break;
    case ReduceKind::kMin:
      init = Scalar(t, std::numeric_limits<double>::infinity());
      break;
  }
  Node n;
  n.op = OpCode::kReduce;
  n.shape.dtype = t;
  for (int64_t d = 0; d < shape(x).rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) {
      n.shape.dims.push_back(dims(x)[d]);
    }
  }
  n.dimensions = std::move(reduced);
  n.reduce_kind = kind;
  n.operands = {x, init};
  return Append(std::move(n));
}

Graph Builder::Finish(std::vector<int> outputs) && {
  g_.outputs = std::move(outputs);
  return std::move(g_);
}

int Mean(Builder& b, int x, const Dims& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= b.dims(x)[d];
  return b.MulC(b.Reduce(x, ReduceKind::kSum, dims), 1.0 / static_cast<double>(count));
}

int Expand(Builder& b, int r, int like, const Dims& reduced) {
  Dims map;
  for (int64_t d = 0; d < b.shape(like).rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) map.push_back(d);
  }
  return b.Broadcast(r, b.dims(like), map);
}

int Silu(Builder& b, int x) { return b.Mul(x, b.Unary(OpCode::kLogistic, x)); }

int Relu(Builder& b, int x) { return b.Max(x, b.Splat(x, 0)); }

int SoftmaxLastDim(Builder& b, int x) {
  const Dims last = {b.shape(x).rank() - 1};
  int mx = b.Reduce(x, ReduceKind::kMax, last);
  int e = b.Unary(OpCode::kExp, b.Sub(x, Expand(b, mx, x, last)));
  int sum = b.Reduce(e, ReduceKind::kSum, last);
  return b.Div(e, Expand(b, sum, e, last));
}

int Dropout(Builder& b, int x, int seed, double keep, int64_t stream) {
  int u = b.RngUniform(seed, DType::kF32, b.dims(x), stream);
  int kept = b.Cmp(CompareDirection::kLt, u, b.Splat(u, keep));
  return b.Select(kept, b.MulC(x, 1.0 / keep), b.Splat(x, 0));
}

}  // namespace stitch::suite
