#include "graph_rewrite.h"

#include <utility>

namespace stitch::internal {

std::optional<double> SplatValue(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.op == OpCode::kBroadcast) return SplatValue(g, n.operands[0]);
  if (n.op != OpCode::kConstant || !IsFloat(n.shape.dtype) || n.literal.f.empty()) return {};
  const double v = n.literal.f[0];
  for (double e : n.literal.f) {
    if (e != v) return {};
  }
  return v;
}

GraphRebuild::GraphRebuild(const Graph& g, std::string origin)
    : g_(g), origin_(std::move(origin)), map_(g.nodes.size(), -1) {
  out_.name = g.name;
  out_.outer_parameters = g.outer_parameters;
}

Graph GraphRebuild::Run(const std::function<int(int id)>& replace) {
  for (int id : TopologicalOrder(g_)) {
    int mapped = replace(id);
    if (mapped < 0) {
      Node copy = g_.nodes[static_cast<size_t>(id)];
      for (int& o : copy.operands) o = map_[static_cast<size_t>(o)];
      mapped = out_.Add(std::move(copy));
    }
    map_[static_cast<size_t>(id)] = mapped;
  }
  for (int o : g_.outputs) out_.outputs.push_back(map_[static_cast<size_t>(o)]);
  return WithoutDeadNodes(std::move(out_));
}

int GraphRebuild::Add(Node n, const Node& like, const char* suffix) {
  n.name = (like.name.empty() ? origin_ : like.name) + suffix;
  n.source = like.source;
  return out_.Add(std::move(n));
}

}  // namespace stitch::internal
