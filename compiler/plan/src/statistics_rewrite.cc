#include "stitch/plan/statistics_rewrite.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph_rewrite.h"

namespace stitch {
namespace {

// How far a scale constant may be from 1/n: f32 rounding of 1/n is within 6e-8 relative.
constexpr double kScaleSlack = 1e-6;

using internal::SplatValue;

bool IsZeroSum(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.op != OpCode::kReduce || n.reduce_kind != ReduceKind::kSum) return false;
  const std::optional<double> init = SplatValue(g, n.operands[1]);
  return init && *init == 0;
}

// A reduce-sum scaled by a constant: sum * c, c * sum or sum / (1/c).
struct ScaledSum {
  int sum = -1;
  int sum_operand = 0;  // which operand of the scaling node is the sum
  double scale = 0;
};

std::optional<ScaledSum> MatchScaledSum(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.op == OpCode::kMul) {
    for (int k = 0; k < 2; ++k) {
      const std::optional<double> c = SplatValue(g, n.operands[1 - k]);
      if (c && IsZeroSum(g, n.operands[k])) return ScaledSum{n.operands[k], k, *c};
    }
    return {};
  }
  if (n.op == OpCode::kDiv) {
    const std::optional<double> c = SplatValue(g, n.operands[1]);
    if (c && *c != 0 && IsZeroSum(g, n.operands[0])) return ScaledSum{n.operands[0], 0, 1 / *c};
  }
  return {};
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// One recognised two-pass mean/variance pair.
struct Statistic {
  int x = -1;
  int mean = -1;  // the scaled sum of x
  ScaledSum mean_sum;
  int var = -1;  // the scaled sum of the squared deviations
  ScaledSum var_sum;
  std::vector<int64_t> reduced;  // sorted
  std::vector<int64_t> kept;     // the other dimensions of x, in order
};

// Returns the pair whose variance is node `v`, when it is recognised exactly.
std::optional<Statistic> MatchVariance(const Graph& g, int v) {
  const DType t = g.nodes[v].shape.dtype;
  if (t != DType::kF32 && t != DType::kF64) return {};
  const std::optional<ScaledSum> var_sum = MatchScaledSum(g, v);
  if (!var_sum) return {};
  const Node& square = g.nodes[g.nodes[var_sum->sum].operands[0]];
  if (square.op != OpCode::kMul || square.operands[0] != square.operands[1]) return {};
  const Node& centred = g.nodes[square.operands[0]];
  if (centred.op != OpCode::kSub) return {};
  const int x = centred.operands[0];
  const Node& expanded = g.nodes[centred.operands[1]];
  if (expanded.op != OpCode::kBroadcast) return {};
  const int mean = expanded.operands[0];
  const std::optional<ScaledSum> mean_sum = MatchScaledSum(g, mean);
  if (!mean_sum || g.nodes[mean_sum->sum].operands[0] != x) return {};
  if (g.nodes[x].shape.dtype != t || g.nodes[mean].shape.dtype != t) return {};

  Statistic s;
  s.x = x;
  s.mean = mean;
  s.mean_sum = *mean_sum;
  s.var = v;
  s.var_sum = *var_sum;
  s.reduced = Sorted(g.nodes[mean_sum->sum].dimensions);
  if (s.reduced.empty() || Sorted(g.nodes[var_sum->sum].dimensions) != s.reduced) return {};
  const std::vector<int64_t>& dims = g.nodes[x].shape.dims;
  double n = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (std::binary_search(s.reduced.begin(), s.reduced.end(), d)) {
      if (dims[d] == 0) return {};
      n *= static_cast<double>(dims[d]);
    } else {
      s.kept.push_back(d);
    }
  }
  if (expanded.dimensions != s.kept || expanded.shape.dims != dims) return {};
  if (std::abs(mean_sum->scale * n - 1) > kScaleSlack) return {};
  if (std::abs(var_sum->scale * n - 1) > kScaleSlack) return {};
  return s;
}

class Rewriter {
 public:
  Rewriter(const Graph& g, std::vector<Statistic> stats)
      : g_(g), stats_(std::move(stats)), by_node_(g.nodes.size(), -1), rebuild_(g, "statistics") {
    for (size_t k = 0; k < stats_.size(); ++k) {
      by_node_[stats_[k].mean] = static_cast<int>(k);
      by_node_[stats_[k].var] = static_cast<int>(k);
    }
    shifted_mean_.assign(stats_.size(), -1);
    shifted_square_sum_.assign(stats_.size(), -1);
  }

  Graph Run() {
    return rebuild_.Run([&](int id) {
      const int k = by_node_[id];
      if (k < 0) return -1;
      return stats_[k].mean == id ? EmitMean(k) : EmitVariance(k);
    });
  }

 private:
  int Mapped(int id) const { return rebuild_.Mapped(id); }
  int Add(Node n, const Node& like, const char* suffix) {
    return rebuild_.Add(std::move(n), like, suffix);
  }

  int Elementwise(OpCode op, int a, int b, const Node& like, const char* suffix) {
    Node n;
    n.op = op;
    n.shape = rebuild_.Rebuilt(a).shape;
    n.operands = {a, b};
    return Add(std::move(n), like, suffix);
  }

  int Broadcast(int r, const Shape& to, std::vector<int64_t> map, const Node& like,
                const char* suffix) {
    Node n;
    n.op = OpCode::kBroadcast;
    n.shape = to;
    n.dimensions = std::move(map);
    n.operands = {r};
    return Add(std::move(n), like, suffix);
  }

  int Reduce(int in, int init, const Node& original, const char* suffix) {
    Node n;
    n.op = OpCode::kReduce;
    n.reduce_kind = ReduceKind::kSum;
    n.dimensions = original.dimensions;
    n.shape = original.shape;
    n.operands = {in, init};
    return Add(std::move(n), original, suffix);
  }

  // The scaling node of a mean (or variance) applied to the new sum `sum`.
  int Scale(const Node& scaling, const ScaledSum& s, int sum, const char* suffix) {
    Node n = scaling;
    for (int& o : n.operands) o = Mapped(o);
    n.operands[s.sum_operand] = sum;
    return Add(std::move(n), scaling, suffix);
  }

  // Emits the shift and the two sibling sums of pair k; returns the new mean. The new
  // variance waits for the old variance's turn, when its scaling operands are mapped.
  int EmitMean(int k) {
    const Statistic& s = stats_[k];
    const Node& mean = g_.nodes[s.mean];
    const Shape& x_shape = g_.nodes[s.x].shape;
    const int x = Mapped(s.x);

    // The shift: x at index 0 of every reduced dimension, one value per output.
    Node slice;
    slice.op = OpCode::kSlice;
    slice.shape = x_shape;
    for (int64_t d : s.reduced) slice.shape.dims[d] = 1;
    slice.slice_starts.assign(x_shape.dims.size(), 0);
    slice.slice_limits = slice.shape.dims;
    slice.slice_strides.assign(x_shape.dims.size(), 1);
    slice.operands = {x};
    const int sample = Add(std::move(slice), mean, ".shift_sample");
    Node reshape;
    reshape.op = OpCode::kReshape;
    reshape.shape = mean.shape;
    reshape.operands = {sample};
    const int shift = Add(std::move(reshape), mean, ".shift");

    const int expanded = Broadcast(shift, x_shape, s.kept, mean, ".shift_expanded");
    const int d = Elementwise(OpCode::kSub, x, expanded, mean, ".shifted");
    const int init = Mapped(g_.nodes[s.mean_sum.sum].operands[1]);
    const int s1 = Reduce(d, init, g_.nodes[s.mean_sum.sum], ".shifted_sum");
    const Node& var_sum = g_.nodes[s.var_sum.sum];
    const int square = Elementwise(OpCode::kMul, d, d, var_sum, ".shifted_square");
    shifted_square_sum_[k] = Reduce(square, init, var_sum, ".shifted_sum");
    shifted_mean_[k] = Scale(mean, s.mean_sum, s1, ".shifted_mean");
    return Elementwise(OpCode::kAdd, shift, shifted_mean_[k], mean, ".one_pass");
  }

  // Emits max(S2/n - (S1/n)^2, 0) for pair k.
  int EmitVariance(int k) {
    const Statistic& s = stats_[k];
    const Node& var = g_.nodes[s.var];
    const int m1 = shifted_mean_[k];
    const int m2 = Scale(var, s.var_sum, shifted_square_sum_[k], ".shifted_mean_square");
    Node zero;
    zero.op = OpCode::kConstant;
    zero.shape = {var.shape.dtype, {}};
    zero.literal.f = {0.0};
    int zeros = Add(std::move(zero), var, ".zero");
    if (var.shape.rank() > 0) zeros = Broadcast(zeros, var.shape, {}, var, ".zeros");
    const int m1_squared = Elementwise(OpCode::kMul, m1, m1, var, ".shift_square");
    const int spread = Elementwise(OpCode::kSub, m2, m1_squared, var, ".unclamped");
    return Elementwise(OpCode::kMax, spread, zeros, var, ".one_pass");
  }

  const Graph& g_;
  std::vector<Statistic> stats_;
  std::vector<int> by_node_;  // the pair whose mean or variance a node is, or -1
  // By pair, once its mean is emitted: S1/n and S2.
  std::vector<int> shifted_mean_;
  std::vector<int> shifted_square_sum_;
  internal::GraphRebuild rebuild_;
};

}  // namespace

StatisticsRewrite RewriteStatisticsOnePass(const Graph& g) {
  // Each mean and each variance belongs to at most one pair; the first variance of a mean
  // (in node order) claims it, and other variances of that mean are copied as they are (they
  // then read the new mean, which is the same value).
  std::vector<Statistic> stats;
  std::vector<bool> claimed(g.nodes.size(), false);
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    std::optional<Statistic> s = MatchVariance(g, static_cast<int>(v));
    if (!s || claimed[s->mean] || claimed[s->var]) continue;
    claimed[s->mean] = claimed[s->var] = true;
    stats.push_back(std::move(*s));
  }
  if (stats.empty()) return {g, 0};
  const int count = static_cast<int>(stats.size());
  return {Rewriter(g, std::move(stats)).Run(), count};
}

Graph OnePassStatisticsRewrite(const Graph& g) { return RewriteStatisticsOnePass(g).graph; }

}  // namespace stitch
