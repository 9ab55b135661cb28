#include "stitch/ir/aliasing.h"

namespace stitch {

int ViewedParameterNode(const Graph& g, int node) {
  while (g.nodes[static_cast<size_t>(node)].op == OpCode::kReshape) {
    node = g.nodes[static_cast<size_t>(node)].operands[0];
  }
  return g.nodes[static_cast<size_t>(node)].op == OpCode::kParameter ? node : -1;
}

int64_t AliasedParameter(const Graph& g, int node) {
  const int viewed = ViewedParameterNode(g, node);
  return viewed < 0 ? -1 : g.nodes[static_cast<size_t>(viewed)].parameter_number;
}

}  // namespace stitch
