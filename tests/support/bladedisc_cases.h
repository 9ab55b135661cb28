// BladeDISC's stitch-fusion regression cases, rewritten as stitch graphs the way our importers
// spell them, at the concrete input shapes the regression tests run with, each with the kernel
// count BladeDISC expects (testdata/corpus/bladedisc/regression_tests_oracle.csv, column
// expected_kernels). The source programs are TensorFlow-dialect MLIR with dynamic shapes
// (testdata/corpus/bladedisc/regression_data/); the translation follows what the TF-to-HLO lowering
// produces:
//   - tf.Sum / tf.Max over a dimension list -> reduce (init 0 / -inf);
//   - tf.Mean -> reduce sum, then divide by the broadcast element count;
//   - tf.ExpandDims + tf.BroadcastTo of a reduce result -> one broadcast with a dimension map
//     (a bare tf.ExpandDims that is itself an output stays a reshape);
//   - scalar operands of binary ops -> broadcast of a scalar constant;
//   - f16 reductions accumulate in f32 (convert, reduce, convert back).
//
// Rows of the oracle that are not here, and why:
//   - EpilogueTest.* (epilogue_fusion_*.mlir) and HorizontalTensor.BasicTest
//     (horizontal_fusion.mlir) are built around tf.MatMul / batched GEMMs: compute-intensive ops,
//     which stitch does not compile.
//   - WhereFusionTest.WhereFusionDynamicShape3DI64Test: tf.Where has a data-dependent output
//     shape, which a static-shape signature cannot express.
//   - LayerNormTest.LayerNorm3DF32, SoftmaxTest.Softmax3DF32, TransposeSimplifierTest.*,
//     KCornerCaseTest.*: no expected kernel count (the stitch-only variants of layer norm and
//     softmax are here).
// ReshapeFusionCPUTest.kStitchTest2 ends in a 1x1 tf.Conv2D; what is here is its
// memory-intensive part (a layer norm with keep_dims), whose result is the convolution's input.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/graph_builder.h"

namespace stitch::testing {

struct BladediscCase {
  std::string name;  // BladeDISC's test name
  Graph graph;       // at the regression test's input shapes
  int oracle_kernels = 0;
  bool must_be_one = false;  // one stitched kernel is the point of the case
  // The same pattern at shapes the host emulator runs in test time, for the cases that
  // ScaleForEmulation cannot shrink enough (it only halves even sizes).
  std::optional<Graph> emulation;
};

namespace bladedisc {

using Dims = std::vector<int64_t>;

inline const Dims& DimsOf(const Graph& g, int x) { return g.nodes[x].shape.dims; }
inline DType TypeOf(const Graph& g, int x) { return g.nodes[x].shape.dtype; }

// A scalar of x's dtype broadcast to x's dims.
inline int SplatLike(Graph& g, int x, double v) {
  return Broadcast(g, ConstScalar(g, TypeOf(g, x), v), DimsOf(g, x), {});
}

inline int ReduceOver(Graph& g, int x, Dims dims, ReduceKind kind) {
  double init = 0;
  if (kind == ReduceKind::kMax) init = -std::numeric_limits<double>::infinity();
  if (kind == ReduceKind::kMin) init = std::numeric_limits<double>::infinity();
  if (kind == ReduceKind::kProd) init = 1;
  return Reduce(g, x, ConstScalar(g, TypeOf(g, x), init), std::move(dims), kind);
}

// tf.Mean: the sum divided by the number of reduced elements.
inline int Mean(Graph& g, int x, const Dims& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= DimsOf(g, x)[d];
  int s = ReduceOver(g, x, dims, ReduceKind::kSum);
  return Binary(g, OpCode::kDiv, s, SplatLike(g, s, static_cast<double>(count)));
}

// Broadcasts `r`, the result of reducing the last dimension of `like`, back to like's dims.
inline int ExpandLast(Graph& g, int r, int like) {
  Dims map;
  for (int64_t d = 0; d + 1 < static_cast<int64_t>(DimsOf(g, like).size()); ++d) map.push_back(d);
  return Broadcast(g, r, DimsOf(g, like), map);
}

// kstitch_fusion_simple.mlir: a row max that is an output and feeds an elementwise output.
inline Graph StitchSimple(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "kstitch_simple";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int m = ReduceOver(g, x, {1}, ReduceKind::kMax);
  g.outputs = {m, Unary(g, OpCode::kNeg, m)};
  return g;
}

// kstitch_fusion_with_splat_const.mlir: as above, adding a scalar constant.
inline Graph StitchSplatConst(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "kstitch_splat_const";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int m = ReduceOver(g, x, {1}, ReduceKind::kMax);
  g.outputs = {m, Binary(g, OpCode::kAdd, m, SplatLike(g, m, 1.234))};
  return g;
}

// kstitch_fusion_with_transpose.mlir: the row max of a transposed input (a column max of the
// input itself).
inline Graph StitchTranspose(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "kstitch_transpose";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int t = Transpose(g, x, {1, 0});
  int m = ReduceOver(g, t, {1}, ReduceKind::kMax);
  g.outputs = {m, Unary(g, OpCode::kNeg, m)};
  return g;
}

// kstitch_fusion_non_skl_output.mlir: a residual add with a bias, then the row mean and the
// centred values (an output that is no reduce), then the row sum of squares.
inline Graph StitchNonSkeletonOutput(int64_t tokens, int64_t hidden) {
  Graph g;
  g.name = "kstitch_non_skeleton_output";
  const Dims full = {1, tokens, hidden};
  int a = Param(g, {DType::kF32, {tokens, hidden}}, 0, "a");
  int b = Param(g, {DType::kF32, full}, 1, "b");
  int bias = Param(g, {DType::kF32, {hidden}}, 2, "bias");
  int biased = Binary(g, OpCode::kAdd, Reshape(g, a, full), Broadcast(g, bias, full, {2}));
  int scaled = Binary(g, OpCode::kMul, b, SplatLike(g, b, 1.0));
  int sum = Binary(g, OpCode::kAdd, biased, scaled);
  int mean = Mean(g, sum, {2});
  int centred = Binary(g, OpCode::kSub, sum, ExpandLast(g, mean, sum));
  int sq = Binary(g, OpCode::kMul, centred, centred);
  g.outputs = {ReduceOver(g, sq, {2}, ReduceKind::kSum), centred};
  return g;
}

// kstitch_fusion_adj_skl_small_output_f16.mlir: an f16 row sum (accumulated in f32) followed by
// an elementwise op on the small result.
inline Graph StitchAdjacentSkeletonF16(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "kstitch_adjacent_skeleton_f16";
  int x = Param(g, {DType::kF16, {rows, cols}}, 0, "x");
  int s = ReduceOver(g, Convert(g, x, DType::kF32), {1}, ReduceKind::kSum);
  g.outputs = {Unary(g, OpCode::kAbs, Convert(g, s, DType::kF16))};
  return g;
}

// kstitch_fusion_non_cover_output.mlir: abs(x) is an output and, sliced, feeds a row sum. The
// slice's begin and size are host i32 inputs in the original; the regression test feeds
// {23, 40} and {123, -1} (-1: to the end), which are constants here.
inline Graph StitchNonCoverOutput(int64_t rows, int64_t cols, Dims begin, Dims size) {
  Graph g;
  g.name = "kstitch_non_cover_output";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int a = Unary(g, OpCode::kAbs, x);
  int sl = Slice(g, a, begin, {begin[0] + size[0], begin[1] + size[1]});
  int s = ReduceOver(g, sl, {1}, ReduceKind::kSum);
  g.outputs = {a, Unary(g, OpCode::kAbs, s)};
  return g;
}

// kstitch_fusion_irregular_xroot.mlir: two row sums over concatenations sharing abs(x), which
// is also an output.
inline Graph StitchIrregularXroot(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "kstitch_irregular_xroot";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int y = Param(g, {DType::kF32, {rows, cols}}, 1, "y");
  int z = Param(g, {DType::kF32, {rows, cols}}, 2, "z");
  int a = Unary(g, OpCode::kAbs, x);
  int c1 = Concat(g, {a, y}, 1);
  int s1 = ReduceOver(g, c1, {1}, ReduceKind::kSum);
  int c2 = Concat(g, {a, z}, 1);
  int s2 = ReduceOver(g, Binary(g, OpCode::kAdd, c1, c2), {1}, ReduceKind::kSum);
  g.outputs = {a, Binary(g, OpCode::kAdd, s1, s2)};
  return g;
}

// kstitch_fusion_3d_f64.mlir: an f64 row sum that is an output and is added back to the input.
inline Graph Stitch3DF64(Dims dims) {
  Graph g;
  g.name = "kstitch_3d_f64";
  int x = Param(g, {DType::kF64, dims}, 0, "x");
  int s = ReduceOver(g, x, {2}, ReduceKind::kSum);
  g.outputs = {s, Binary(g, OpCode::kAdd, x, ExpandLast(g, s, x))};
  return g;
}

// kstitch_fusion_elemwise_shm_cache_{large,small}.mlir: attention scores (f16, divided by an
// f16 scale), cast to f32, masked by an additive f32 term, softmax over the last dimension, cast
// back to f16; the reshaped input and both row statistics (with a trailing unit dimension) are
// outputs too.
inline Graph AttentionSoftmax(int64_t batch, int64_t heads, int64_t seq, int64_t keys) {
  Graph g;
  g.name = "kstitch_attention_softmax";
  const Dims full = {batch, heads, seq, keys};
  const Dims stat = {batch, heads, seq, 1};
  int scores = Param(g, {DType::kF16, {batch * heads, seq, keys}}, 0, "scores");
  int scale = Param(g, {DType::kF16, full}, 1, "scale");
  int mask = Param(g, {DType::kF32, full}, 2, "mask");
  int s4 = Reshape(g, scores, full);
  int logits =
      Binary(g, OpCode::kAdd, Convert(g, Binary(g, OpCode::kDiv, s4, scale), DType::kF32), mask);
  int mx = ReduceOver(g, logits, {3}, ReduceKind::kMax);
  int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, logits, ExpandLast(g, mx, logits)));
  int sum = ReduceOver(g, e, {3}, ReduceKind::kSum);
  int p = Binary(g, OpCode::kDiv, e, ExpandLast(g, sum, e));
  int out = Reshape(g, Convert(g, p, DType::kF16), {batch * heads, seq, keys});
  g.outputs = {s4, Reshape(g, mx, stat), Reshape(g, sum, stat), out};
  return g;
}

// kstitch_fusion_cpu_multioutputs.mlir: exp(|x|) normalised by its row sum, with |x| an output.
inline Graph StitchMultiOutputs(Dims dims) {
  Graph g;
  g.name = "kstitch_multi_outputs";
  int x = Param(g, {DType::kF32, dims}, 0, "x");
  int a = Unary(g, OpCode::kAbs, x);
  int s = ReduceOver(g, Unary(g, OpCode::kExp, a), {2}, ReduceKind::kSum);
  g.outputs = {a, Binary(g, OpCode::kDiv, a, ExpandLast(g, s, a))};
  return g;
}

// layer_norm.mlir: Var[x] = E[x^2] - E[x]^2, (x - E[x]) / sqrt(Var[x] + 1e-5) * 2.3 + 3.3.
inline Graph LayerNorm(Dims dims) {
  Graph g;
  g.name = "layer_norm";
  int x = Param(g, {DType::kF32, dims}, 0, "x");
  int mean = Mean(g, x, {2});
  int mean_sq = Mean(g, Binary(g, OpCode::kMul, x, x), {2});
  int var = Binary(g, OpCode::kSub, mean_sq, Binary(g, OpCode::kMul, mean, mean));
  int sd = Unary(g, OpCode::kSqrt, Binary(g, OpCode::kAdd, var, SplatLike(g, var, 1e-5)));
  int norm = Binary(g, OpCode::kDiv, Binary(g, OpCode::kSub, x, ExpandLast(g, mean, x)),
                    ExpandLast(g, sd, x));
  int y = Binary(g, OpCode::kMul, norm, SplatLike(g, norm, 2.3));
  g.outputs = {Binary(g, OpCode::kAdd, y, SplatLike(g, y, 3.3))};
  return g;
}

// softmax.mlir: exp(x - max(x)) / sum(exp(x - max(x))) over the last dimension.
inline Graph Softmax3D(Dims dims) {
  Graph g;
  g.name = "softmax";
  int x = Param(g, {DType::kF32, dims}, 0, "x");
  int mx = ReduceOver(g, x, {2}, ReduceKind::kMax);
  int e = Unary(g, OpCode::kExp, Binary(g, OpCode::kSub, x, ExpandLast(g, mx, x)));
  int s = ReduceOver(g, e, {2}, ReduceKind::kSum);
  g.outputs = {Binary(g, OpCode::kDiv, e, ExpandLast(g, s, e))};
  return g;
}

// reshape_fusion_cpu_kloop.mlir: elementwise ops around an inserted unit dimension and a
// transpose that moves it to the front.
inline Graph ReshapeLoop(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "reshape_fusion_loop";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int n = Unary(g, OpCode::kNeg, Unary(g, OpCode::kAbs, x));
  int e = Unary(g, OpCode::kExp, Reshape(g, n, {rows, 1, cols}));
  g.outputs = {Transpose(g, e, {1, 0, 2})};
  return g;
}

// reshape_fusion_cpu_kinput.mlir: a row sum of exp(|x|) through a unit-dimension reshape.
inline Graph ReshapeInput(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "reshape_fusion_input";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int e = Unary(g, OpCode::kExp, Unary(g, OpCode::kAbs, x));
  g.outputs = {ReduceOver(g, Reshape(g, e, {rows, 1, cols}), {2}, ReduceKind::kSum)};
  return g;
}

// reshape_fusion_cpu_kstitch.mlir: as above with a mean, and |x| an output too.
inline Graph ReshapeStitch(int64_t rows, int64_t cols) {
  Graph g;
  g.name = "reshape_fusion_stitch";
  int x = Param(g, {DType::kF32, {rows, cols}}, 0, "x");
  int a = Unary(g, OpCode::kAbs, x);
  int e = Unary(g, OpCode::kExp, a);
  g.outputs = {a, Mean(g, Reshape(g, e, {rows, 1, cols}), {2})};
  return g;
}

// reshape_fusion_cpu_kstitch_test2.mlir up to its convolution: a layer norm with keep_dims
// statistics, gamma = 2 and beta = 3 as splat [hidden] constants, y = x * (rsqrt(var + eps) *
// gamma) + (beta - mean * rsqrt(var + eps) * gamma), given an inserted unit dimension for the
// convolution.
inline Graph ReshapeStitchLayerNorm(int64_t batch, int64_t tokens, int64_t hidden) {
  Graph g;
  g.name = "reshape_fusion_stitch_layer_norm";
  const Dims full = {batch, tokens, hidden};
  const Dims keep = {batch, tokens, 1};
  int x = Param(g, {DType::kF32, full}, 0, "x");
  int gamma = ConstF(g, {DType::kF32, {hidden}}, {2.0});
  int beta = ConstF(g, {DType::kF32, {hidden}}, {3.0});
  // keep_dims results are [batch, tokens, 1]; each use broadcasts them from [batch, tokens].
  int mean = Reshape(g, Mean(g, x, {2}), keep);
  auto expand = [&](int k) { return Broadcast(g, Reshape(g, k, {batch, tokens}), full, {0, 1}); };
  int diff = Binary(g, OpCode::kSub, x, expand(mean));
  int var = Reshape(g, Mean(g, Binary(g, OpCode::kMul, diff, diff), {2}), keep);
  int inv = Unary(g, OpCode::kRsqrt, Binary(g, OpCode::kAdd, var, SplatLike(g, var, 1e-12)));
  int scale = Binary(g, OpCode::kMul, expand(inv), Broadcast(g, gamma, full, {2}));
  int shifted = Binary(g, OpCode::kMul, scale, expand(mean));
  int y = Binary(g, OpCode::kAdd, Binary(g, OpCode::kMul, x, scale),
                 Binary(g, OpCode::kSub, Broadcast(g, beta, full, {2}), shifted));
  g.outputs = {Reshape(g, y, {batch, 1, tokens, hidden})};
  return g;
}

}  // namespace bladedisc

// Every case, in the oracle file's order.
inline std::vector<BladediscCase> BladediscCases() {
  using namespace bladedisc;
  std::vector<BladediscCase> cases;
  auto add = [&](std::string name, Graph g, int oracle, bool must_be_one,
                 std::optional<Graph> emulation = std::nullopt) {
    cases.push_back({std::move(name), std::move(g), oracle, must_be_one, std::move(emulation)});
  };
  add("KStitchSimpleSmallColumnF32", StitchSimple(11000, 123), 1, true);
  // 12345 columns is what makes this case block-wise; halving cannot touch an odd size, so the
  // emulator runs fewer rows of the same length.
  add("KStitchSimpleLargeColumnF32", StitchSimple(11000, 12345), 1, true, StitchSimple(128, 12345));
  // BladeDISC expects 2 kernels only without its shape-constraint IR, where the dynamic reshape's
  // shape computation splits the fusion; with static shapes it expects 1.
  add("KStitchNonSkeletonOutputF32", StitchNonSkeletonOutput(128, 768), 1, false);
  add("KStitchAdjacentSkeletonWithSmallOutputF16", StitchAdjacentSkeletonF16(110, 100), 1, false);
  add("KStitchNonCoverOutputF32", StitchNonCoverOutput(200, 300, {23, 40}, {123, 300 - 40}), 1,
      false);
  add("KStitchIrregularXrootF32", StitchIrregularXroot(10, 112), 2, false);
  add("KStitch3DF64", Stitch3DF64({1, 128, 768}), 1, false);
  add("KStitchSimpleWithSplatConstF32", StitchSplatConst(11000, 123), 1, false);
  add("KStitchSimpleWithTransposeF32", StitchTranspose(123, 11000), 1, false);
  // Halving would shrink the rows to 64 keys and make this the small case; the emulator runs
  // 512-key rows, fewer of them.
  add("KStitchElemwiseShmCacheLarge", AttentionSoftmax(8, 12, 512, 512), 1, true,
      AttentionSoftmax(1, 12, 128, 512));
  add("KStitchElemwiseShmCacheSmall", AttentionSoftmax(8, 12, 512, 64), 1, false);
  // BladeDISC checks this count (and the reshape-fusion ones below) on its CPU backends; the
  // fusion pattern is the same.
  add("KStitchFusionCPUMultiOutputs", StitchMultiOutputs({1, 128, 768}), 1, false);
  add("LayerNormGPUStitchOnly3DF32", LayerNorm({1, 128, 768}), 1, true);
  add("SoftmaxGPUStitchOnly3DF32", Softmax3D({1, 128, 768}), 1, true);
  add("ReshapeFusionKLoop", ReshapeLoop(12, 13), 1, false);
  add("ReshapeFusionKInput", ReshapeInput(12, 13), 1, false);
  add("ReshapeFusionKStitch", ReshapeStitch(12, 13), 1, false);
  add("ReshapeFusionKStitch2LayerNorm", ReshapeStitchLayerNorm(1, 20, 560), 1, false);
  return cases;
}

}  // namespace stitch::testing
