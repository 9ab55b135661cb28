// A graph's float parameters and outputs moved to another float dtype, its computation left
// as it is: each parameter of another float dtype becomes a parameter of `to` converted to
// the dtype the graph computed with, and each float output of another dtype is converted to
// `to` (an output that is a convert of a float value, directly or through reshapes and
// transposes used by nothing else, converts to `to` instead, so no rounding to the old dtype
// is left in between). An f32 subgraph retyped to f16 then takes f16 tensors, converts them to f32,
// computes and converts back, as XLA lowers f16 models; an f16 subgraph retyped to f32
// takes f32 tensors. The kernels' loads, stores and vector widths are those of `to`.
#pragma once

#include <utility>
#include <vector>

#include "stitch/ir/graph.h"

namespace stitch::testing {

inline bool IsFloatForRetype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// Returns `g` with its float parameters and outputs of dtype f32, f16 or bf16 in `to` (see
// above); other dtypes (pred, integers, f64) stay. Nodes keep their order; converts follow
// the parameter they convert.
inline Graph RetypeFloats(const Graph& g, DType to) {
  Graph out;
  out.name = g.name;
  out.outer_parameters = g.outer_parameters;
  std::vector<int> mapped(g.nodes.size(), -1);
  const std::vector<std::vector<int>> users = g.Users();
  // Output converts (through reshapes and transposes used by nothing else) that convert to
  // `to` instead, with the reshapes and transposes between them and the output.
  std::vector<bool> retarget(g.nodes.size(), false);
  for (int o : g.outputs) {
    std::vector<int> chain;
    int n = o;
    while ((g.nodes[static_cast<size_t>(n)].op == OpCode::kReshape ||
            g.nodes[static_cast<size_t>(n)].op == OpCode::kTranspose) &&
           users[static_cast<size_t>(n)].size() <= 1) {
      chain.push_back(n);
      n = g.nodes[static_cast<size_t>(n)].operands[0];
    }
    const Node& c = g.nodes[static_cast<size_t>(n)];
    const bool unshared = n == o || users[static_cast<size_t>(n)].size() == 1;
    if (c.op == OpCode::kConvert && unshared && IsFloatForRetype(c.shape.dtype) &&
        c.shape.dtype != to &&
        IsFloatForRetype(g.nodes[static_cast<size_t>(c.operands[0])].shape.dtype)) {
      retarget[static_cast<size_t>(n)] = true;
      for (int link : chain) retarget[static_cast<size_t>(link)] = true;
    }
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node n = g.nodes[i];
    if (retarget[i]) n.shape.dtype = to;
    for (int& operand : n.operands) operand = mapped[static_cast<size_t>(operand)];
    const DType computed = n.shape.dtype;
    if (n.op == OpCode::kParameter && IsFloatForRetype(computed) && computed != to) {
      n.shape.dtype = to;
      const int parameter = out.Add(n);
      Node convert;
      convert.name = n.name + ".retyped";
      convert.op = OpCode::kConvert;
      convert.shape = g.nodes[i].shape;
      convert.operands = {parameter};
      mapped[i] = out.Add(std::move(convert));
    } else {
      mapped[i] = out.Add(std::move(n));
    }
  }
  for (int o : g.outputs) {
    const Shape& shape = g.nodes[static_cast<size_t>(o)].shape;
    int node = mapped[static_cast<size_t>(o)];
    if (!retarget[static_cast<size_t>(o)] && IsFloatForRetype(shape.dtype) && shape.dtype != to) {
      Node convert;
      convert.name = g.nodes[static_cast<size_t>(o)].name + ".out";
      convert.op = OpCode::kConvert;
      convert.shape = shape;
      convert.shape.dtype = to;
      convert.operands = {node};
      node = out.Add(std::move(convert));
    }
    out.outputs.push_back(node);
  }
  return out;
}

// Whether RetypeFloats(g, to) changes `g`.
inline bool RetypeChanges(const Graph& g, DType to) {
  for (const Node& n : g.nodes) {
    if (n.op == OpCode::kParameter && IsFloatForRetype(n.shape.dtype) && n.shape.dtype != to) {
      return true;
    }
  }
  for (int o : g.outputs) {
    const DType t = g.nodes[static_cast<size_t>(o)].shape.dtype;
    if (IsFloatForRetype(t) && t != to) return true;
  }
  return false;
}

}  // namespace stitch::testing
