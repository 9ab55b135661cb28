// Graphs whose outer dimension varies (shape_class.h), as training jobs run them: rows of
// batch x sequence tokens, or a batch of images, at any extent.
#pragma once

#include <cstdint>

#include "support/normalization_graphs.h"

namespace stitch::testing {

// A transformer block's memory-intensive tail over `tokens` rows of `hidden` features, as
// the rows of [batch x sequence, hidden]: layer norm, scale and shift, a tanh activation and
// a residual add; also the bias gradient (a sum over the rows) and the row means.
inline Graph TokenBlock(int64_t tokens, int64_t hidden, DType t = kF32) {
  Graph g;
  g.name = "token_block";
  const int x_in = Param(g, {t, {tokens, hidden}}, 0, "x");
  const int gamma = Param(g, {t, {hidden}}, 1, "gamma");
  const int beta = Param(g, {t, {hidden}}, 2, "beta");
  const int residual = Param(g, {t, {tokens, hidden}}, 3, "residual");
  const int x = ToF32(g, x_in);
  const TwoPass s = TwoPassStatistics(g, x, {1});
  int y = Binary(g, OpCode::kMul, s.centred, Expand(g, Rstd(g, s.var), x, {1}));
  y = Binary(g, OpCode::kMul, y, PerFeature(g, gamma, x, 1));
  y = Binary(g, OpCode::kAdd, y, PerFeature(g, beta, x, 1));
  y = Unary(g, OpCode::kTanh, y);
  y = Binary(g, OpCode::kAdd, y, ToF32(g, residual));
  const int bias_grad = Reduce(g, y, ConstScalar(g, kF32, 0), {0}, ReduceKind::kSum);
  g.outputs = {FromF32(g, y, t), bias_grad, s.mean};
  g.outer_parameters = {0, 3};
  return g;
}

// [batch, sequence, hidden] folded into rows and back: a reshape that keeps the extent
// (batch) outermost, a softmax over the hidden features, and a sum over the sequence.
inline Graph FoldedSoftmax(int64_t batch, int64_t sequence, int64_t hidden) {
  Graph g;
  g.name = "folded_softmax";
  const int x = Param(g, {kF32, {batch, sequence, hidden}}, 0, "x");
  const int rows = Reshape(g, x, {batch * sequence, hidden});
  const int max = Reduce(g, rows, ConstScalar(g, kF32, -1e30), {1}, ReduceKind::kMax);
  const int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, rows, Expand(g, max, rows, {1})));
  const int sum = Reduce(g, e, ConstScalar(g, kF32, 0), {1}, ReduceKind::kSum);
  const int p = Binary(g, OpCode::kDiv, e, Expand(g, sum, e, {1}));
  const int back = Reshape(g, p, {batch, sequence, hidden});
  const int per_batch = Reduce(g, back, ConstScalar(g, kF32, 0), {1}, ReduceKind::kSum);
  g.outputs = {back, per_batch};
  g.outer_parameters = {0};
  return g;
}

// Batch statistics of NHWC images: the sum over the batch and the pixels per channel (a
// column reduction over the varying dimension) and the input scaled by it.
inline Graph BatchChannelSums(int64_t batch, int64_t pixels, int64_t channels, DType t) {
  Graph g;
  g.name = "batch_channel_sums";
  const int x = ToF32(g, Param(g, {t, {batch, pixels, channels}}, 0, "x"));
  const int sum = Reduce(g, x, ConstScalar(g, kF32, 0), {0, 1}, ReduceKind::kSum);
  const int scaled = Binary(g, OpCode::kMul, x, PerFeature(g, Param(g, {t, {channels}}, 1), x, 2));
  g.outputs = {sum, FromF32(g, scaled, t)};
  g.outer_parameters = {0};
  return g;
}

}  // namespace stitch::testing
