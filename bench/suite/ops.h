// A compact graph builder for the benchmark suite: one call per op, shapes inferred, so each
// pattern reads like its op chain. It only appends nodes; stitch::Verify is the judge of the
// result (BuildSuite verifies every graph it returns).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stitch/ir/graph.h"

namespace stitch::suite {

using Dims = std::vector<int64_t>;

class Builder {
 public:
  explicit Builder(std::string name) { g_.name = std::move(name); }

  const Shape& shape(int x) const { return g_.nodes[x].shape; }
  const Dims& dims(int x) const { return g_.nodes[x].shape.dims; }
  DType dtype(int x) const { return g_.nodes[x].shape.dtype; }

  // Leaves. Parameters are numbered in the order they are added.
  int Param(DType t, Dims dims, std::string name);
  int Scalar(DType t, double v);
  int ScalarBits(DType t, int64_t bits);  // integer scalar given by its bit pattern
  // A scalar constant of `like`'s dtype broadcast to `like`'s dims.
  int Splat(int like, double v);
  int SplatBits(int like, int64_t bits);
  int Iota(DType t, Dims dims, int64_t dim);
  int RngUniform(int seed, DType t, Dims dims, int64_t stream);

  // Elementwise.
  int Unary(OpCode op, int x);
  int Binary(OpCode op, int a, int b);
  int Add(int a, int b) { return Binary(OpCode::kAdd, a, b); }
  int Sub(int a, int b) { return Binary(OpCode::kSub, a, b); }
  int Mul(int a, int b) { return Binary(OpCode::kMul, a, b); }
  int Div(int a, int b) { return Binary(OpCode::kDiv, a, b); }
  int Max(int a, int b) { return Binary(OpCode::kMax, a, b); }
  int AddC(int x, double v) { return Add(x, Splat(x, v)); }
  int MulC(int x, double v) { return Mul(x, Splat(x, v)); }
  int Cmp(CompareDirection d, int a, int b);
  int Select(int p, int a, int b);
  // Converts to `t`; returns `x` itself when it already has that dtype.
  int Convert(int x, DType t);
  int BitcastConvert(int x, DType t);

  // Data movement.
  int Broadcast(int x, Dims out, Dims map);
  int Reshape(int x, Dims dims);
  int Transpose(int x, Dims perm);

  // Reduces `dims` of `x` starting from the combiner's identity.
  int Reduce(int x, ReduceKind kind, Dims dims);

  Graph Finish(std::vector<int> outputs) &&;

 private:
  int Append(Node n);

  Graph g_;
  int64_t params_ = 0;
};

// Patterns shared by several families. All work on f32 values.

// Sum over `dims` times 1/(product of their sizes).
int Mean(Builder& b, int x, const Dims& dims);
// Broadcasts `r`, the result of reducing `reduced` dims of `like`, back to `like`'s dims.
int Expand(Builder& b, int r, int like, const Dims& reduced);
// x * logistic(x).
int Silu(Builder& b, int x);
// max(x, 0).
int Relu(Builder& b, int x);
// Softmax of f32 `x` over its last dimension.
int SoftmaxLastDim(Builder& b, int x);
// Dropout with keep probability `keep`: select(u < keep, x / keep, 0) with u from
// rng-uniform seeded by `seed`.
int Dropout(Builder& b, int x, int seed, double keep, int64_t stream);

}  // namespace stitch::suite
