#include "stitch/plan/op_classes.h"

#include <algorithm>

namespace stitch {

bool IsHeavy(OpCode op) { return CostOf(op) == OpCost::kCostly; }

std::string_view OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kLeaf:
      return "leaf";
    case OpKind::kLightElementwise:
      return "light_elementwise";
    case OpKind::kHeavyElementwise:
      return "heavy_elementwise";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kRowReduce:
      return "row_reduce";
    case OpKind::kColumnReduce:
      return "column_reduce";
    case OpKind::kMixedReduce:
      return "mixed_reduce";
    case OpKind::kLayout:
      return "layout";
    case OpKind::kRng:
      return "rng";
  }
  return "invalid";
}

std::string_view EdgeKindName(EdgeKind k) {
  switch (k) {
    case EdgeKind::kOneToOne:
      return "one_to_one";
    case EdgeKind::kOneToMany:
      return "one_to_many";
    case EdgeKind::kManyToOne:
      return "many_to_one";
    case EdgeKind::kReindex:
      return "reindex";
  }
  return "invalid";
}

namespace {

// Classifies a reduce by where its reduced dimensions sit among the input's non-trivial
// dimensions: all at the minor end (row), none at the minor end (column), or otherwise.
OpKind ReduceKindOf(const Graph& g, const Node& n) {
  const std::vector<int64_t>& in = g.nodes[n.operands[0]].shape.dims;
  std::vector<bool> reduced(in.size(), false);
  for (int64_t d : n.dimensions) reduced[static_cast<size_t>(d)] = true;
  int last = -1;
  for (int d = static_cast<int>(in.size()) - 1; d >= 0; --d) {
    if (in[d] != 1) {
      last = d;
      break;
    }
  }
  if (last < 0) return OpKind::kRowReduce;  // every dimension is 1
  if (!reduced[last]) return OpKind::kColumnReduce;
  bool seen_kept = false;
  for (int d = last; d >= 0; --d) {
    if (in[d] == 1) continue;
    if (!reduced[d]) {
      seen_kept = true;
    } else if (seen_kept) {
      return OpKind::kMixedReduce;
    }
  }
  return OpKind::kRowReduce;
}

// Whether no non-trivial dimension of one side (reduced when `reduced_first`, else kept)
// follows a non-trivial dimension of the other.
bool ReducedAtOneEnd(const Graph& g, int id, bool reduced_first) {
  const Node& n = g.nodes[id];
  const std::vector<int64_t>& in = g.nodes[n.operands[0]].shape.dims;
  std::vector<bool> reduced(in.size(), false);
  for (int64_t d : n.dimensions) reduced[static_cast<size_t>(d)] = true;
  bool second_seen = false;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    const bool first_side = reduced[d] == reduced_first;
    if (!first_side) {
      second_seen = true;
    } else if (second_seen) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool ReducesLeadingDims(const Graph& g, int id) { return ReducedAtOneEnd(g, id, true); }

bool ReducesTrailingDims(const Graph& g, int id) { return ReducedAtOneEnd(g, id, false); }

OpKind ClassifyNode(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  switch (ClassOf(n.op)) {
    case OpClass::kLeaf:
      return OpKind::kLeaf;
    case OpClass::kRng:
      return OpKind::kRng;
    case OpClass::kReduce:
      return ReduceKindOf(g, n);
    case OpClass::kElementwise:
      return IsHeavy(n.op) ? OpKind::kHeavyElementwise : OpKind::kLightElementwise;
    case OpClass::kDataMovement:
      return n.op == OpCode::kBroadcast ? OpKind::kBroadcast : OpKind::kLayout;
  }
  return OpKind::kLightElementwise;
}

EdgeKind ClassifyEdge(const Graph& g, int consumer, int operand) {
  const Node& c = g.nodes[consumer];
  const int producer = c.operands[static_cast<size_t>(operand)];
  const Shape& ps = g.nodes[producer].shape;
  switch (ClassOf(c.op)) {
    case OpClass::kReduce:
      return operand == 0 && ps.elements() > c.shape.elements() ? EdgeKind::kManyToOne
                                                                : EdgeKind::kOneToMany;
    case OpClass::kElementwise:
      // A scalar operand of an elementwise op is implicitly broadcast.
      return ps.rank() == 0 && c.shape.rank() > 0 ? EdgeKind::kOneToMany : EdgeKind::kOneToOne;
    case OpClass::kDataMovement:
      if (c.op == OpCode::kBroadcast || c.op == OpCode::kPad) {
        return ps.elements() < c.shape.elements() ? EdgeKind::kOneToMany : EdgeKind::kOneToOne;
      }
      if (c.op == OpCode::kReshape) return EdgeKind::kOneToOne;
      return EdgeKind::kReindex;
    case OpClass::kRng:
    case OpClass::kLeaf:
      return EdgeKind::kOneToMany;
  }
  return EdgeKind::kOneToOne;
}

bool MovesMinorDimension(const Graph& g, int id) {
  const Node& t = g.nodes[id];
  const int rank = t.shape.rank();
  if (t.op != OpCode::kTranspose || rank < 2) return false;
  const auto minor = std::find(t.dimensions.begin(), t.dimensions.end(), rank - 1);
  for (auto d = minor == t.dimensions.end() ? minor : minor + 1; d != t.dimensions.end(); ++d) {
    if (t.shape.dims[static_cast<size_t>(d - t.dimensions.begin())] > 1) return true;
  }
  return false;
}

}  // namespace stitch
