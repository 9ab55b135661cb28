// What the graph rewrites share (statistics_rewrite.cc, tanh_rewrite.cc): reading a constant
// that holds one value everywhere, and rebuilding a graph node by node with some nodes
// replaced.
//
// Thread-safety: pure functions; a GraphRebuild is used by one thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stitch/ir/graph.h"

namespace stitch::internal {

// Returns the value of a float constant that holds one value everywhere (a splat literal or a
// constant broadcast from one), or nullopt.
std::optional<double> SplatValue(const Graph& g, int id);

// `g` rebuilt in topological order: each node is copied with its operands mapped to their
// copies, or replaced by what the rewrite emits for it. The outputs follow their nodes, the
// graph keeps its name and outer parameters, and nodes left dead are removed.
class GraphRebuild {
 public:
  // `origin` names the nodes a rewrite adds to nodes that have no name of their own.
  GraphRebuild(const Graph& g, std::string origin);

  // Rebuilds the graph: for each node, `replace(id)` returns the index in the new graph of
  // what stands for it, or -1 to copy the node.
  Graph Run(const std::function<int(int id)>& replace);

  // The index in the new graph of node `id`, once it is rebuilt.
  int Mapped(int id) const { return map_[static_cast<size_t>(id)]; }
  // Node `index` of the new graph.
  const Node& Rebuilt(int index) const { return out_.nodes[static_cast<size_t>(index)]; }
  // Appends `n`, named and sourced after `like` (its name plus `suffix`); returns its index.
  int Add(Node n, const Node& like, const char* suffix);

 private:
  const Graph& g_;
  const std::string origin_;
  std::vector<int> map_;
  Graph out_;
};

}  // namespace stitch::internal
