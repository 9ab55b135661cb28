// Graphs whose tensors are stored in another order than their logical one, as the HLO
// importer reads a non-default layout and as a channels-last tensor reaches stitch.
#pragma once

#include <cstddef>
#include <vector>

#include "support/graph_builder.h"

namespace stitch::testing {

// The logical NCHW order of a tensor stored NHWC, as a transpose's permutation.
inline const std::vector<int64_t> kNchwOfNhwc = {0, 3, 1, 2};

inline std::vector<int64_t> InversePermutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

// `g` with every parameter and output of rank `perm.size()` stored in another order: the
// parameter holds the tensor with its dimensions permuted by the inverse of `perm` and is read
// through transpose(., perm); the output is written through transpose(., inverse(perm)).
inline Graph StoredPermuted(const Graph& g, const std::vector<int64_t>& perm) {
  const size_t rank = perm.size();
  const std::vector<int64_t> inv = InversePermutation(perm);
  Graph r;
  r.name = g.name + ".stored";
  std::vector<int> map(g.nodes.size(), -1);
  for (int id : TopologicalOrder(g)) {
    Node n = g.nodes[id];
    for (int& o : n.operands) o = map[o];
    if (n.op != OpCode::kParameter || n.shape.dims.size() != rank) {
      map[id] = r.Add(std::move(n));
      continue;
    }
    std::vector<int64_t> stored(rank);
    for (size_t i = 0; i < rank; ++i) stored[perm[i]] = n.shape.dims[i];
    n.shape.dims = stored;
    map[id] = Transpose(r, r.Add(std::move(n)), perm);
  }
  for (int o : g.outputs) {
    r.outputs.push_back(r.nodes[map[o]].shape.dims.size() == rank ? Transpose(r, map[o], inv)
                                                                  : map[o]);
  }
  return r;
}

// The live nodes of `g` with op `op`.
inline int CountLiveOps(const Graph& g, OpCode op) {
  const std::vector<bool> live = LiveNodes(g);
  int n = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) n += live[k] && g.nodes[k].op == op;
  return n;
}

}  // namespace stitch::testing
