// Normalization graphs as models write them: batch norm, group norm and layer norm with
// two-pass statistics (mean, then the mean of the squared deviations), in any dtype, for the
// statistics rewrite's tests and the emulator checks of the plans built on it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "support/graph_builder.h"

namespace stitch::testing {

using Dims = std::vector<int64_t>;

inline constexpr DType kF32 = DType::kF32;

inline Dims KeptDims(int rank, const Dims& reduced) {
  Dims kept;
  for (int64_t d = 0; d < rank; ++d) {
    bool r = false;
    for (int64_t e : reduced) r = r || e == d;
    if (!r) kept.push_back(d);
  }
  return kept;
}

inline int Splat(Graph& g, int like, double v) {
  return Broadcast(g, ConstScalar(g, g.nodes[like].shape.dtype, v), g.nodes[like].shape.dims, {});
}

// sum(x, reduced) * (1 / n), as the suite writes a mean; `scale_count` overrides n.
inline int Mean(Graph& g, int x, const Dims& reduced, int64_t scale_count = 0,
                ReduceKind kind = ReduceKind::kSum) {
  int64_t n = 1;
  for (int64_t d : reduced) n *= g.nodes[x].shape.dims[d];
  if (scale_count > 0) n = scale_count;
  const int sum = Reduce(g, x, ConstScalar(g, g.nodes[x].shape.dtype, 0), reduced, kind);
  return Binary(g, OpCode::kMul, sum, Splat(g, sum, 1.0 / static_cast<double>(n)));
}

// Broadcasts the statistic `r` back over the reduced dimensions of `like`.
inline int Expand(Graph& g, int r, int like, const Dims& reduced) {
  return Broadcast(g, r, g.nodes[like].shape.dims, KeptDims(g.nodes[like].shape.rank(), reduced));
}

struct TwoPass {
  int mean, centred, var;
};

// mean = Mean(x), centred = x - mean, var = Mean(centred^2): the suite's statistics.
inline TwoPass TwoPassStatistics(Graph& g, int x, const Dims& reduced) {
  TwoPass s;
  s.mean = Mean(g, x, reduced);
  s.centred = Binary(g, OpCode::kSub, x, Expand(g, s.mean, x, reduced));
  s.var = Mean(g, Binary(g, OpCode::kMul, s.centred, s.centred), reduced);
  return s;
}

inline int Rstd(Graph& g, int var) {
  return Unary(g, OpCode::kRsqrt, Binary(g, OpCode::kAdd, var, Splat(g, var, 1e-5)));
}

inline int ToF32(Graph& g, int x) {
  return g.nodes[x].shape.dtype == kF32 ? x : Convert(g, x, kF32);
}
inline int FromF32(Graph& g, int x, DType t) { return t == kF32 ? x : Convert(g, x, t); }

// Per-feature parameter `p` converted to f32 and broadcast along `axis` of `like`.
inline int PerFeature(Graph& g, int p, int like, int64_t axis) {
  return Broadcast(g, ToF32(g, p), g.nodes[like].shape.dims, {axis});
}

// Training batch norm forward on `dims` of dtype `t`, statistics over every dim but
// `channel`: outputs y (dtype t), the f32 mean and the f32 rstd.
inline Graph BatchNormForward(DType t, Dims dims, int64_t channel) {
  Graph g;
  g.name = "batch_norm_forward";
  const Dims reduced = [&] {
    Dims r;
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      if (d != channel) r.push_back(d);
    }
    return r;
  }();
  const int x = ToF32(g, Param(g, {t, dims}, 0, "x"));
  const int gamma = Param(g, {t, {dims[channel]}}, 1, "gamma");
  const int beta = Param(g, {t, {dims[channel]}}, 2, "beta");
  const TwoPass s = TwoPassStatistics(g, x, reduced);
  const int rstd = Rstd(g, s.var);
  int y = Binary(g, OpCode::kMul, s.centred, Expand(g, rstd, x, reduced));
  y = Binary(g, OpCode::kMul, y, PerFeature(g, gamma, x, channel));
  y = Binary(g, OpCode::kAdd, y, PerFeature(g, beta, x, channel));
  g.outputs = {FromF32(g, y, t), s.mean, rstd};
  return g;
}

// Group norm + swish on NCHW of dtype `t`: statistics over [N, G, C/G, H, W] dims {2, 3, 4}.
inline Graph GroupNormSwish(DType t, int64_t n, int64_t c, int64_t h, int64_t w, int64_t groups) {
  Graph g;
  g.name = "group_norm_swish";
  const Dims nchw = {n, c, h, w};
  const Dims stats = {2, 3, 4};
  const int x = ToF32(g, Param(g, {t, nchw}, 0, "x"));
  const int gamma = Param(g, {t, {c}}, 1, "gamma");
  const int beta = Param(g, {t, {c}}, 2, "beta");
  const int xg = Reshape(g, x, {n, groups, c / groups, h, w});
  const TwoPass s = TwoPassStatistics(g, xg, stats);
  const int rstd = Rstd(g, s.var);
  int y = Reshape(g, Binary(g, OpCode::kMul, s.centred, Expand(g, rstd, xg, stats)), nchw);
  y = Binary(g, OpCode::kMul, y, PerFeature(g, gamma, y, 1));
  y = Binary(g, OpCode::kAdd, y, PerFeature(g, beta, y, 1));
  y = Binary(g, OpCode::kMul, y, Unary(g, OpCode::kLogistic, y));
  g.outputs = {FromF32(g, y, t)};
  return g;
}

// Layer norm over the last dim of `dims` of dtype `t`, `layers` times in a row. With
// `bias`, a bias per feature (parameter 3, "b") is added to x in `t` first, as BERT's
// bias_add + layernorm does.
inline Graph LayerNorm(DType t, Dims dims, int layers = 1, bool bias = false) {
  Graph g;
  g.name = bias ? "bias_layer_norm" : "layer_norm";
  const int64_t h = static_cast<int64_t>(dims.size()) - 1;
  const int gamma = Param(g, {t, {dims[h]}}, 1, "gamma");
  const int beta = Param(g, {t, {dims[h]}}, 2, "beta");
  int x = Param(g, {t, dims}, 0, "x");
  if (bias)
    x = Binary(g, OpCode::kAdd, x, Broadcast(g, Param(g, {t, {dims[h]}}, 3, "b"), dims, {h}));
  x = ToF32(g, x);
  for (int l = 0; l < layers; ++l) {
    const TwoPass s = TwoPassStatistics(g, x, {h});
    int y = Binary(g, OpCode::kMul, s.centred, Expand(g, Rstd(g, s.var), x, {h}));
    y = Binary(g, OpCode::kMul, y, PerFeature(g, gamma, x, h));
    x = Binary(g, OpCode::kAdd, y, PerFeature(g, beta, x, h));
  }
  g.outputs = {FromF32(g, x, t)};
  return g;
}

// The f32 statistics of x (dtype t) over `reduced`: outputs mean, var and rstd. With `naive`,
// the variance is the textbook one-pass E[x^2] - E[x]^2 instead of the two-pass form.
inline Graph Statistics(DType t, Dims dims, Dims reduced, bool naive = false) {
  Graph g;
  g.name = naive ? "naive_statistics" : "statistics";
  const int x = ToF32(g, Param(g, {t, std::move(dims)}, 0, "x"));
  int mean, var;
  if (naive) {
    mean = Mean(g, x, reduced);
    const int mean_square = Mean(g, Binary(g, OpCode::kMul, x, x), reduced);
    var = Binary(g, OpCode::kSub, mean_square, Binary(g, OpCode::kMul, mean, mean));
  } else {
    const TwoPass s = TwoPassStatistics(g, x, reduced);
    mean = s.mean;
    var = s.var;
  }
  g.outputs = {mean, var, Rstd(g, var)};
  return g;
}

}  // namespace stitch::testing
