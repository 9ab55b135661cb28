// The one-pass statistics rewrite: it fires on batch-norm, group-norm and layer-norm
// statistics and leaves every other graph alone; the rewritten graph computes what the
// original does; and, evaluated with f32 arithmetic, its shifted sums keep the variance
// accurate where the naive E[x^2] - E[x]^2 does not.
#include "stitch/plan/statistics_rewrite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "stitch/ir/verifier.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"
#include "support/graph_builder.h"
#include "support/normalization_graphs.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

using namespace stitch::testing;
using Dims = std::vector<int64_t>;

// What a plan sees of the statistics: the live reduces, how many read (through other nodes)
// the result of another reduce, and how many pairs of them reduce d and d * d over the same
// dims, with d the input shifted by a slice of itself.
struct ReduceStructure {
  int reduces = 0;
  int dependent = 0;
  int shifted_siblings = 0;
};

ReduceStructure Structure(const Graph& g) {
  ReduceStructure r;
  const std::vector<bool> live = LiveNodes(g);
  std::vector<int> reduces;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (live[k] && g.nodes[k].op == OpCode::kReduce) reduces.push_back(static_cast<int>(k));
  }
  r.reduces = static_cast<int>(reduces.size());
  for (int a : reduces) {
    const std::vector<bool> reads = ReachedFrom(g, {g.nodes[a].operands[0]});
    for (int b : reduces) {
      if (reads[b]) {
        ++r.dependent;
        break;
      }
    }
  }
  auto sorted = [](Dims v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  for (int a : reduces) {
    const int d = g.nodes[a].operands[0];
    const Node& shifted = g.nodes[d];
    if (shifted.op != OpCode::kSub) continue;
    const Node& expanded = g.nodes[shifted.operands[1]];
    if (expanded.op != OpCode::kBroadcast) continue;
    const Node& reshape = g.nodes[expanded.operands[0]];
    if (reshape.op != OpCode::kReshape) continue;
    const Node& sample = g.nodes[reshape.operands[0]];
    if (sample.op != OpCode::kSlice || sample.operands[0] != shifted.operands[0]) continue;
    for (int b : reduces) {
      const Node& square = g.nodes[g.nodes[b].operands[0]];
      if (square.op == OpCode::kMul && square.operands[0] == d && square.operands[1] == d &&
          sorted(g.nodes[b].dimensions) == sorted(g.nodes[a].dimensions)) {
        ++r.shifted_siblings;
      }
    }
  }
  return r;
}

// Evaluates `g` as an f32 kernel would: every float value is rounded to f32 after each op
// (converts round to their dtype), and a reduce-sum adds in f32 as a tree. Supports the ops
// of the statistics graphs here.
std::vector<Tensor> EvaluateInF32(const Graph& g, const std::vector<Tensor>& params) {
  std::vector<std::vector<float>> v(g.nodes.size());
  auto strides = [](const Dims& dims) {
    Dims s(dims.size(), 1);
    for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
    return s;
  };
  for (int id : TopologicalOrder(g)) {
    const Node& n = g.nodes[id];
    const Dims& dims = n.shape.dims;
    const Dims out_strides = strides(dims);
    const int64_t count = n.shape.elements();
    std::vector<float>& out = v[id];
    auto in = [&](int k) -> const std::vector<float>& { return v[n.operands[k]]; };
    auto in_dims = [&](int k) -> const Dims& { return g.nodes[n.operands[k]].shape.dims; };
    switch (n.op) {
      case OpCode::kParameter:
        for (double e : params[n.parameter_number].f) out.push_back(static_cast<float>(e));
        break;
      case OpCode::kConstant:
        for (int64_t k = 0; k < count; ++k) {
          out.push_back(static_cast<float>(n.literal.f[n.literal.f.size() == 1 ? 0 : k]));
        }
        break;
      case OpCode::kConvert:
        for (float e : in(0)) out.push_back(static_cast<float>(RoundToDType(e, n.shape.dtype)));
        break;
      case OpCode::kReshape:
        out = in(0);
        break;
      case OpCode::kBroadcast:
      case OpCode::kSlice: {
        const Dims from = strides(in_dims(0));
        for (int64_t k = 0; k < count; ++k) {
          int64_t src = 0;
          for (size_t d = 0; d < dims.size(); ++d) {
            const int64_t i = k / out_strides[d] % dims[d];
            if (n.op == OpCode::kSlice) {
              src += (n.slice_starts[d] + i * n.slice_strides[d]) * from[d];
            }
          }
          for (size_t j = 0; n.op == OpCode::kBroadcast && j < n.dimensions.size(); ++j) {
            const int64_t d = n.dimensions[j];
            src += k / out_strides[d] % dims[d] * from[j];
          }
          out.push_back(in(0)[src]);
        }
        break;
      }
      case OpCode::kAdd:
      case OpCode::kSub:
      case OpCode::kMul:
      case OpCode::kMax:
        for (int64_t k = 0; k < count; ++k) {
          const float a = in(0)[k], b = in(1)[k];
          out.push_back(n.op == OpCode::kAdd   ? a + b
                        : n.op == OpCode::kSub ? a - b
                        : n.op == OpCode::kMul ? a * b
                                               : std::max(a, b));
        }
        break;
      case OpCode::kRsqrt:
        for (float e : in(0)) out.push_back(1.0f / std::sqrt(e));
        break;
      case OpCode::kReduce: {
        EXPECT_EQ(n.reduce_kind, ReduceKind::kSum);
        const Dims& from = in_dims(0);
        const Dims kept = KeptDims(static_cast<int>(from.size()), n.dimensions);
        const Dims from_strides = strides(from);
        std::vector<std::vector<float>> terms(count);
        for (int64_t k = 0; k < static_cast<int64_t>(in(0).size()); ++k) {
          int64_t o = 0;
          for (size_t j = 0; j < kept.size(); ++j) {
            o += k / from_strides[kept[j]] % from[kept[j]] * out_strides[j];
          }
          terms[o].push_back(in(0)[k]);
        }
        for (std::vector<float>& t : terms) {
          for (size_t width = 1; width < t.size(); width *= 2) {
            for (size_t i = 0; i + width < t.size(); i += 2 * width) t[i] += t[i + width];
          }
          out.push_back(in(1)[0] + (t.empty() ? 0.0f : t[0]));
        }
        break;
      }
      default:
        ADD_FAILURE() << "EvaluateInF32 does not support " << OpCodeName(n.op);
        out.assign(count, 0.0f);
        break;
    }
  }
  std::vector<Tensor> result;
  for (int o : g.outputs) {
    Tensor t = Tensor::Zeros(g.nodes[o].shape);
    for (size_t k = 0; k < v[o].size(); ++k) t.f[k] = v[o][k];
    result.push_back(std::move(t));
  }
  return result;
}

// Values of `shape` drawn from N(mean, 1), rounded to the shape's dtype.
Tensor OffsetTensor(const Shape& shape, double mean, std::mt19937_64& rng) {
  Tensor t = Tensor::Zeros(shape);
  std::normal_distribution<double> dist(mean, 1.0);
  for (double& e : t.f) e = RoundToDType(dist(rng), shape.dtype);
  return t;
}

// The inputs of `g`: x from `make_x`, the other parameters uniform.
template <typename MakeX>
std::vector<Tensor> Inputs(const Graph& g, std::mt19937_64& rng, MakeX make_x) {
  std::vector<Tensor> params;
  for (int p : g.Parameters()) {
    params.push_back(g.nodes[p].parameter_number == 0 ? make_x(g.nodes[p].shape)
                                                      : RandomTensor(g.nodes[p].shape, rng));
  }
  return params;
}

// Compares every output of `got` with `want`, the values of `reference`'s outputs.
::testing::AssertionResult SameOutputs(const Graph& reference, const std::vector<Tensor>& want,
                                       const std::vector<Tensor>& got) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "output count differs";
  for (size_t k = 0; k < want.size(); ++k) {
    const Comparison c = Compare(want[k], got[k], OutputTolerance(reference, want[k].shape.dtype));
    if (!c.pass) return ::testing::AssertionFailure() << "output " << k << ": " << c.message;
  }
  return ::testing::AssertionSuccess();
}

// Checks that `rewritten` verifies, keeps `g`'s signature, and gives `g`'s outputs (by the
// interpreter) on `params`.
void ExpectSameValues(const Graph& g, const Graph& rewritten, const std::vector<Tensor>& params) {
  ASSERT_TRUE(Verify(rewritten).ok()) << Verify(rewritten).ToString() << "\n" << ToText(rewritten);
  ASSERT_EQ(rewritten.outputs.size(), g.outputs.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    EXPECT_EQ(rewritten.nodes[rewritten.outputs[k]].shape, g.nodes[g.outputs[k]].shape) << k;
  }
  const std::vector<int> want_params = g.Parameters(), got_params = rewritten.Parameters();
  ASSERT_EQ(want_params.size(), got_params.size());
  for (size_t k = 0; k < want_params.size(); ++k) {
    EXPECT_EQ(rewritten.nodes[got_params[k]].shape, g.nodes[want_params[k]].shape);
  }
  StatusOr<std::vector<Tensor>> want = Evaluate(g, params);
  StatusOr<std::vector<Tensor>> got = Evaluate(rewritten, params);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(SameOutputs(g, *want, *got));
}

std::string SeedTrace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)";
}

// The rewrite fired `pairs` times and left one phase of sibling reduces per statistic.
void ExpectOnePass(const Graph& g, const StatisticsRewrite& r, int pairs) {
  SCOPED_TRACE(ToText(r.graph));
  EXPECT_EQ(r.rewritten, pairs);
  ASSERT_TRUE(Verify(r.graph).ok()) << Verify(r.graph).ToString();
  const ReduceStructure before = Structure(g);
  const ReduceStructure after = Structure(r.graph);
  EXPECT_EQ(before.reduces, 2 * pairs);
  EXPECT_EQ(before.shifted_siblings, 0);
  EXPECT_EQ(after.reduces, 2 * pairs);
  EXPECT_EQ(after.shifted_siblings, pairs);
  if (pairs == 1) {
    EXPECT_EQ(before.dependent, 1);  // the variance reads the mean
    EXPECT_EQ(after.dependent, 0);   // both sums read x alone
  }
}

TEST(OnePassStatisticsRewrite, FiresOnBatchNormForwardNchwAndNhwc) {
  const Graph nchw = BatchNormForward(DType::kF16, {3, 5, 7, 9}, 1);  // stats over {0, 2, 3}
  ExpectOnePass(nchw, RewriteStatisticsOnePass(nchw), 1);
  const Graph nhwc = BatchNormForward(DType::kF16, {3, 7, 9, 5}, 3);  // stats over {0, 1, 2}
  ExpectOnePass(nhwc, RewriteStatisticsOnePass(nhwc), 1);
}

TEST(OnePassStatisticsRewrite, FiresOnGroupNorm) {
  const Graph g = GroupNormSwish(DType::kF16, 2, 6, 5, 7, 3);
  ExpectOnePass(g, RewriteStatisticsOnePass(g), 1);
}

TEST(OnePassStatisticsRewrite, FiresOnLayerNorm) {
  const Graph g = LayerNorm(DType::kF32, {3, 5, 17});
  ExpectOnePass(g, RewriteStatisticsOnePass(g), 1);
  // Two layers in a row: the second statistics read the first's output.
  const Graph two = LayerNorm(DType::kBF16, {7, 33}, 2);
  ExpectOnePass(two, RewriteStatisticsOnePass(two), 2);
}

TEST(OnePassStatisticsRewrite, FiresOnStatisticsOverEveryDimension) {
  // The statistics are scalars: the shift is a reshape of a [1, 1] slice to a scalar.
  const Graph g = Statistics(DType::kF32, {5, 7}, {0, 1});
  const StatisticsRewrite r = RewriteStatisticsOnePass(g);
  ExpectOnePass(g, r, 1);
  std::mt19937_64 rng(1);
  ExpectSameValues(g, r.graph,
                   Inputs(g, rng, [&](const Shape& s) { return RandomTensor(s, rng); }));
}

TEST(OnePassStatisticsRewrite, FiresOnOtherSpellingsOfTheMean) {
  // mean = sum / n, var = (1/n) * sum: the constant on either side, or a divisor.
  Graph g;
  const int x = Param(g, {kF32, {3, 5, 7}}, 0, "x");
  const int sum = Reduce(g, x, ConstScalar(g, kF32, 0), {0, 2}, ReduceKind::kSum);
  const int mean = Binary(g, OpCode::kDiv, sum, Splat(g, sum, 21));
  const int c = Binary(g, OpCode::kSub, x, Expand(g, mean, x, {0, 2}));
  const int sq_sum =
      Reduce(g, Binary(g, OpCode::kMul, c, c), ConstScalar(g, kF32, 0), {0, 2}, ReduceKind::kSum);
  const int var = Binary(g, OpCode::kMul, Splat(g, sq_sum, 1.0 / 21), sq_sum);
  g.outputs = {var, c, mean};
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  const StatisticsRewrite r = RewriteStatisticsOnePass(g);
  ExpectOnePass(g, r, 1);
  std::mt19937_64 rng(2);
  ExpectSameValues(g, r.graph,
                   Inputs(g, rng, [&](const Shape& s) { return RandomTensor(s, rng); }));
}

TEST(OnePassStatisticsRewrite, ComputesWhatTheTwoPassGraphsDo) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const Graph graphs[] = {
        BatchNormForward(t, {3, 5, 7, 9}, 1),
        BatchNormForward(t, {3, 7, 9, 5}, 3),
        BatchNormForward(t, {4, 3, 16, 40}, 1),  // more than 1024 values per channel
        GroupNormSwish(t, 2, 6, 5, 7, 3),
        LayerNorm(t, {3, 5, 17}),
        LayerNorm(t, {7, 33}, 2),
        Statistics(t, {3, 5, 7, 9}, {0, 2, 3}),
    };
    for (const Graph& g : graphs) {
      SCOPED_TRACE(g.name);
      const StatisticsRewrite r = RewriteStatisticsOnePass(g);
      EXPECT_GE(r.rewritten, 1);
      // Uniform values, and values far from zero (mean 1000, std 1).
      ExpectSameValues(g, r.graph,
                       Inputs(g, rng, [&](const Shape& s) { return RandomTensor(s, rng); }));
      ExpectSameValues(g, r.graph,
                       Inputs(g, rng, [&](const Shape& s) { return OffsetTensor(s, 1000, rng); }));
    }
  }
}

// With f32 arithmetic and |mean| >> std, the shifted sums keep the statistics within the
// kernels' tolerance of the exact two-pass values, and the naive one-pass form does not: the
// shift is what makes one pass safe.
TEST(OnePassStatisticsRewrite, ShiftKeepsF32VarianceAccurateWhereTheNaiveFormFails) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  struct Case {
    Dims dims, reduced;
  };
  const Case cases[] = {
      {{5, 16, 9, 11}, {0, 2, 3}},   // batch norm, NCHW
      {{5, 9, 11, 16}, {0, 1, 2}},   // batch norm, NHWC
      {{2, 3, 4, 5, 7}, {2, 3, 4}},  // group norm
      {{16, 257}, {1}},              // layer norm
  };
  for (DType t : {DType::kF32, DType::kF16}) {
    for (const Case& c : cases) {
      const Graph g = Statistics(t, c.dims, c.reduced);
      const Graph naive = Statistics(t, c.dims, c.reduced, /*naive=*/true);
      SCOPED_TRACE(ToText(g));
      const StatisticsRewrite r = RewriteStatisticsOnePass(g);
      ASSERT_EQ(r.rewritten, 1);
      ASSERT_EQ(RewriteStatisticsOnePass(naive).rewritten, 0);
      const std::vector<Tensor> params =
          Inputs(g, rng, [&](const Shape& s) { return OffsetTensor(s, 1000, rng); });
      StatusOr<std::vector<Tensor>> exact = Evaluate(g, params);
      ASSERT_TRUE(exact.ok());
      // In the interpreter's double precision all three forms agree.
      StatusOr<std::vector<Tensor>> naive_exact = Evaluate(naive, params);
      ASSERT_TRUE(naive_exact.ok());
      EXPECT_TRUE(SameOutputs(g, *exact, *naive_exact));
      // In f32, the two-pass and the shifted one-pass statistics pass; the naive ones fail.
      EXPECT_TRUE(SameOutputs(g, *exact, EvaluateInF32(g, params)));
      EXPECT_TRUE(SameOutputs(g, *exact, EvaluateInF32(r.graph, params)));
      const std::vector<Tensor> naive_f32 = EvaluateInF32(naive, params);
      const Comparison var = Compare((*exact)[1], naive_f32[1], OutputTolerance(g, kF32));
      EXPECT_FALSE(var.pass) << "naive variance within tolerance, max error " << var.max_abs_error;
      EXPECT_GT(var.max_abs_error, 1e-3);
      // With values near zero the naive form is fine: the failure above is the offset's.
      const std::vector<Tensor> centred =
          Inputs(g, rng, [&](const Shape& s) { return OffsetTensor(s, 0, rng); });
      StatusOr<std::vector<Tensor>> centred_exact = Evaluate(g, centred);
      ASSERT_TRUE(centred_exact.ok());
      EXPECT_TRUE(SameOutputs(g, *centred_exact, EvaluateInF32(naive, centred)));
    }
  }
}

TEST(OnePassStatisticsRewrite, RandomGraphsComputeTheSame) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  int rewritten = 0;
  for (int i = 0; i < 80; ++i) {
    const Graph g = RandomGraphBuilder(seed + static_cast<uint64_t>(i), 4096).Build();
    SCOPED_TRACE("graph " + std::to_string(i) + "\n" + ToText(g));
    const StatisticsRewrite r = RewriteStatisticsOnePass(g);
    rewritten += r.rewritten;
    if (r.rewritten == 0) {
      EXPECT_EQ(ToText(r.graph), ToText(g));
      continue;
    }
    ExpectSameValues(g, r.graph,
                     Inputs(g, rng, [&](const Shape& s) { return RandomTensor(s, rng); }));
  }
  // About half the random graphs hold a layer-norm-like pair.
  EXPECT_GT(rewritten, 0);
}

// Graphs that are not exactly two-pass statistics come back unchanged.
TEST(OnePassStatisticsRewrite, LeavesOtherGraphsAlone) {
  const Dims dims = {4, 6, 8};
  const Dims reduced = {0, 2};
  std::deque<Graph> graphs;  // keeps references to its elements valid as it grows
  auto start = [&](DType t = kF32) -> Graph& {
    Graph& g = graphs.emplace_back();
    Param(g, {t, dims}, 0, "x");
    Param(g, {t, dims}, 1, "y");
    return g;
  };
  {  // The variance about the mean of another tensor.
    Graph& g = start();
    const int mean = Mean(g, 1, reduced);
    const int c = Binary(g, OpCode::kSub, 0, Expand(g, mean, 0, reduced));
    g.outputs = {mean, Mean(g, Binary(g, OpCode::kMul, c, c), reduced)};
  }
  {  // The variance over other dimensions than the mean.
    Graph& g = start();
    const int mean = Mean(g, 0, reduced);
    const int c = Binary(g, OpCode::kSub, 0, Expand(g, mean, 0, reduced));
    g.outputs = {mean, Mean(g, Binary(g, OpCode::kMul, c, c), {0})};
  }
  {  // The mean over other dimensions than the variance, broadcast like the variance's.
    Graph& g = start();
    const int mean = Mean(g, 0, {0});
    const int mean_of_mean = Mean(g, mean, {1});  // [6, 8] -> [6]
    const int c = Binary(g, OpCode::kSub, 0, Expand(g, mean_of_mean, 0, reduced));
    g.outputs = {mean_of_mean, Mean(g, Binary(g, OpCode::kMul, c, c), reduced)};
  }
  {  // A max-reduce for the variance, and one for the mean.
    Graph& g = start();
    const int mean = Mean(g, 0, reduced);
    const int c = Binary(g, OpCode::kSub, 0, Expand(g, mean, 0, reduced));
    const int sq = Binary(g, OpCode::kMul, c, c);
    g.outputs = {mean, Mean(g, sq, reduced, 0, ReduceKind::kMax)};
    Graph& h = start();
    const int max_mean = Mean(h, 0, reduced, 0, ReduceKind::kMax);
    const int hc = Binary(h, OpCode::kSub, 0, Expand(h, max_mean, 0, reduced));
    h.outputs = {max_mean, Mean(h, Binary(h, OpCode::kMul, hc, hc), reduced)};
  }
  {  // The unbiased variance: sum / (n - 1).
    Graph& g = start();
    const int mean = Mean(g, 0, reduced);
    const int c = Binary(g, OpCode::kSub, 0, Expand(g, mean, 0, reduced));
    g.outputs = {mean, Mean(g, Binary(g, OpCode::kMul, c, c), reduced, 4 * 8 - 1)};
  }
  {  // Not a square: (x - mean) * y.
    Graph& g = start();
    const int mean = Mean(g, 0, reduced);
    const int c = Binary(g, OpCode::kSub, 0, Expand(g, mean, 0, reduced));
    g.outputs = {mean, Mean(g, Binary(g, OpCode::kMul, c, 1), reduced)};
  }
  {  // Half-precision statistics.
    Graph& g = start(DType::kF16);
    const TwoPass s = TwoPassStatistics(g, 0, reduced);
    g.outputs = {s.mean, s.var};
  }
  for (const Graph& g : graphs) {
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString() << "\n" << ToText(g);
    const StatisticsRewrite r = RewriteStatisticsOnePass(g);
    EXPECT_EQ(r.rewritten, 0) << ToText(g);
    EXPECT_EQ(ToText(r.graph), ToText(g));
    EXPECT_EQ(r.graph.nodes.size(), g.nodes.size());
  }
  // The same graphs with a proper two-pass variance do fire (the cases above differ from a
  // match in one thing only).
  Graph& g = start();
  const TwoPass s = TwoPassStatistics(g, 0, reduced);
  g.outputs = {s.mean, s.var};
  EXPECT_EQ(RewriteStatisticsOnePass(g).rewritten, 1);
}

}  // namespace
}  // namespace stitch
