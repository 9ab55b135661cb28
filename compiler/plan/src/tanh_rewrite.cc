#include "stitch/plan/tanh_rewrite.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph_rewrite.h"

namespace stitch {
namespace {

using internal::SplatValue;

// A recognised sum: node `sum` is one plus (sign +1) or one minus (sign -1) tanh(`z`).
struct TanhSum {
  int sum = -1;
  int z = -1;
  double sign = 1;
};

std::optional<TanhSum> MatchTanhSum(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.shape.dtype != DType::kF32 || n.operands.size() != 2) return {};
  if (n.op != OpCode::kAdd && n.op != OpCode::kSub) return {};
  for (int k = 0; k < 2; ++k) {
    const Node& t = g.nodes[n.operands[k]];
    if (t.op != OpCode::kTanh || t.shape != n.shape) continue;
    const std::optional<double> one = SplatValue(g, n.operands[1 - k]);
    if (!one || *one != 1.0) continue;
    if (n.op == OpCode::kAdd) return TanhSum{id, t.operands[0], 1};
    if (k == 1) return TanhSum{id, t.operands[0], -1};  // 1 - tanh(z); tanh(z) - 1 is not
  }
  return {};
}

// Emits 2 * logistic(sign * 2 * z) for each recognised sum, in its place.
class Rewriter {
 public:
  Rewriter(const Graph& g, std::vector<std::optional<TanhSum>> sums)
      : g_(g), sums_(std::move(sums)), rebuild_(g, "tanh_sum") {}

  Graph Run() {
    return rebuild_.Run([&](int id) { return sums_[id] ? EmitLogistic(*sums_[id]) : -1; });
  }

 private:
  // `value` everywhere in the sum's shape: a scalar literal, broadcast where the sum has
  // dimensions.
  int Splat(double value, const Node& sum, const char* suffix) {
    Node c;
    c.op = OpCode::kConstant;
    c.shape = {sum.shape.dtype, {}};
    c.literal.f = {value};
    const int scalar = rebuild_.Add(std::move(c), sum, suffix);
    if (sum.shape.rank() == 0) return scalar;
    Node b;
    b.op = OpCode::kBroadcast;
    b.shape = sum.shape;
    b.operands = {scalar};
    return rebuild_.Add(std::move(b), sum, suffix);
  }

  int Elementwise(OpCode op, std::vector<int> operands, const Node& like, const char* suffix) {
    Node n;
    n.op = op;
    n.shape = like.shape;
    n.operands = std::move(operands);
    return rebuild_.Add(std::move(n), like, suffix);
  }

  int EmitLogistic(const TanhSum& s) {
    const Node& sum = g_.nodes[s.sum];
    const int scale = Splat(2 * s.sign, sum, ".logistic_scale");
    const int arg = Elementwise(OpCode::kMul, {rebuild_.Mapped(s.z), scale}, sum, ".logistic_arg");
    const int logistic = Elementwise(OpCode::kLogistic, {arg}, sum, ".logistic");
    const int two = Splat(2, sum, ".two");
    return Elementwise(OpCode::kMul, {logistic, two}, sum, ".as_logistic");
  }

  const Graph& g_;
  std::vector<std::optional<TanhSum>> sums_;
  internal::GraphRebuild rebuild_;
};

}  // namespace

TanhRewrite RewriteOnePlusTanh(const Graph& g) {
  std::vector<std::optional<TanhSum>> sums(g.nodes.size());
  int count = 0;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    sums[id] = MatchTanhSum(g, static_cast<int>(id));
    count += sums[id].has_value();
  }
  if (count == 0) return {g, 0};
  return {Rewriter(g, std::move(sums)).Run(), count};
}

Graph OnePlusTanhAsLogistic(const Graph& g) { return RewriteOnePlusTanh(g).graph; }

}  // namespace stitch
