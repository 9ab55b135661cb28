#include "stitch/reference/shape_scaling.h"

#include <algorithm>

#include "stitch/ir/verifier.h"

namespace stitch {
namespace {

// One halving step of the even sizes >= `threshold`; nullopt when it changes nothing or
// breaks the graph.
std::optional<Graph> HalveFrom(const Graph& g, int64_t threshold) {
  auto size = [threshold](int64_t v) { return (v % 2 == 0 && v >= threshold) ? v / 2 : v; };
  auto bound = [](int64_t v) { return v % 2 == 0 ? v / 2 : v; };
  Graph s = g;
  bool changed = false;
  for (Node& n : s.nodes) {
    int64_t before = n.shape.elements();
    for (int64_t& d : n.shape.dims) d = size(d);
    if (n.shape.elements() == before) continue;
    changed = true;
    if (n.op == OpCode::kConstant && n.literal.size() > 1) return std::nullopt;
  }
  if (!changed) return std::nullopt;
  for (Node& n : s.nodes) {
    for (auto* v : {&n.slice_starts, &n.slice_limits, &n.pad_low, &n.pad_high}) {
      for (int64_t& x : *v) x = bound(x);
    }
  }
  if (!Verify(s).ok()) return std::nullopt;
  return s;
}

// A step halves the sizes >= 16 when that keeps the graph valid; when a small size is tied
// to a larger one through a reshape ([8,12,512] <-> [96,512]), it retries with a higher
// threshold so only the larger sizes move.
std::optional<Graph> Halve(const Graph& g) {
  for (int64_t threshold = 16; threshold <= 4096; threshold *= 2) {
    if (std::optional<Graph> s = HalveFrom(g, threshold)) return s;
  }
  return std::nullopt;
}

}  // namespace

int64_t LargestTensor(const Graph& g) {
  int64_t m = 0;
  for (const Node& n : g.nodes) m = std::max(m, n.shape.elements());
  return m;
}

std::optional<ScaledGraph> ScaleForEmulation(const Graph& g, int64_t budget, int64_t slack) {
  ScaledGraph current{g, 0};
  while (LargestTensor(current.graph) > budget) {
    std::optional<Graph> next = Halve(current.graph);
    if (!next) break;
    current = ScaledGraph{std::move(*next), current.halvings + 1};
  }
  if (LargestTensor(current.graph) <= budget * slack) return current;
  return std::nullopt;
}

}  // namespace stitch
