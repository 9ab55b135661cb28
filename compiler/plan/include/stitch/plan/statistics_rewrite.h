// The one-pass statistics rewrite: batch norm, group norm and layer norm compute their
// statistics in two passes,
//
//   mean = reduce_sum(x, dims) * (1/n)
//   var  = reduce_sum((x - broadcast(mean)) * (x - broadcast(mean)), dims) * (1/n)
//
// so the variance's reduction reads the mean, and a stitched kernel reads x once for the mean
// and again, after a barrier, for the variance. This pass rewrites each such pair into shifted
// sums over one read of x:
//
//   K     = x at index 0 of every reduced dimension (a slice, reshaped to the mean's shape)
//   d     = x - broadcast(K)
//   S1    = reduce_sum(d, dims)      S2 = reduce_sum(d * d, dims)
//   mean' = K + S1/n                 var' = max(S2/n - (S1/n)^2, 0)
//
// S1 and S2 are sibling reductions of the same elementwise input, so they run in one phase of
// one kernel. For training batch norm forward on f16, whose traffic lower bound is one read of
// x and one write of y, the stitched kernel then reads x twice (statistics, normalisation)
// instead of three times: 1.5x the lower bound instead of 2.0x.
//
// Numerics. The naive one-pass form E[x^2] - E[x]^2 loses every significant digit when
// |mean| >> std (mean 1000, std 1 in f32: E[x^2] ~ 1e6 carries an absolute rounding error of
// ~0.06, the size of the variance itself). Shifting by a sample K of the data bounds the
// cancellation: the relative error of var' is about n*u*(1 + (mean - K)^2 / var) with u the
// unit roundoff (n*u is the usual summation bound; log2(n)*u for tree reductions), against
// n*u for the two-pass form. Since K is one of the reduced values, (mean - K)^2 <= n * var, and
// for data without outliers (mean - K)^2 / var is of order 1, so var' is as accurate as the
// two-pass variance up to a small constant. The max(., 0) clamps the tiny negative values that
// rounding can leave when the variance is (nearly) zero. mean' = K + S1/n is as accurate as the
// two-pass mean.
//
// Every use of the old mean and variance (graph outputs, the centred x - mean that the
// normalisation reads, the rsqrt) reads mean' and var' instead; outputs keep their order,
// shapes and dtypes, and the parameters are unchanged. Nodes left dead by the rewrite are
// removed (as are nodes that were dead before; parameters always stay).
//
// A pair is rewritten only when it is recognised exactly: both reductions are sums with a zero
// init over the same set of dimensions (at least one, none of extent 0) of the same x; the
// variance reduces the square m * m of one node m = x - broadcast(mean), the broadcast mapping
// the mean back along exactly the kept dimensions; each sum is scaled to a mean by a constant
// splat (times 1/n, or divided by n); and x is f32 or f64 (half-precision statistics are left
// as they are: the suite computes statistics in f32). Anything else (a variance about another
// value, over other dimensions, with another reduction, an unbiased 1/(n-1) scale) is left
// alone, and a graph with no recognised pair is returned unchanged.
//
// Thread-safety: pure functions.
#pragma once

#include "stitch/ir/graph.h"

namespace stitch {

struct StatisticsRewrite {
  Graph graph;        // the rewritten graph (a copy of the input when nothing matched)
  int rewritten = 0;  // mean/variance pairs rewritten into shifted one-pass sums
};

// Returns the verified graph `g` with every recognised two-pass mean/variance pair rewritten
// into shifted one-pass sums, as described above, and how many pairs were rewritten. The
// result passes Verify and computes the same values up to floating-point rounding.
StatisticsRewrite RewriteStatisticsOnePass(const Graph& g);

// RewriteStatisticsOnePass(g).graph.
Graph OnePassStatisticsRewrite(const Graph& g);

}  // namespace stitch
