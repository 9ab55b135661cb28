#include "stitch/ir/shape_class.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace stitch {
namespace {

// Union-find over nodes: two nodes share a set when their dimension 0 is the same size up
// to a fixed factor at every extent (an elementwise op and its operands, a reduce that keeps
// dimension 0 and its input, a reshape that folds inner dimensions into dimension 0, ...).
class DimZeroSets {
 public:
  explicit DimZeroSets(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void Join(int a, int b) { parent_[Find(a)] = Find(b); }

 private:
  std::vector<int> parent_;
};

// A node whose operand's dimension 0 must not vary: the op moves or cuts it.
struct FixedUse {
  int node = -1;
  int operand = -1;
  const char* why = "";
};

// A node whose own dimension 0 cannot vary: it is taken from a dimension other than its
// operand's dimension 0 (which only dimension 0 may be), or cut to a fixed size. Such a node
// must not meet the outer extent through the ops around it, or the graph would disagree with
// itself at every other extent.
struct FixedNode {
  int node = -1;
  const char* why = "";
};

std::string Describe(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  std::string s = "node " + std::to_string(i);
  if (!n.name.empty()) s += " '" + n.name + "'";
  return s + " (" + std::string(OpCodeName(n.op)) + ")";
}

int64_t Product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to && d < dims.size(); ++d) p *= dims[d];
  return p;
}

// Whether reshaping `from` into `to` keeps the extent in dimension 0: dimension 0 of one is
// dimension 0 of the other times some of the other's next dimensions, so the inner
// dimensions regroup among themselves at every extent.
bool ReshapeKeepsDimZero(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.empty() || to.empty()) return false;
  for (size_t j = 1; j <= from.size(); ++j) {
    if (to[0] == Product(from, 0, j)) return true;
  }
  for (size_t j = 1; j <= to.size(); ++j) {
    if (from[0] == Product(to, 0, j)) return true;
  }
  return false;
}

// Whether a reduce over `reduced` of `input` keeps a dimension longer than 1 after its last
// reduced one: its kernels then walk columns, and a varying dimension 0 among the reduced
// ones only changes how many elements each column sums. Without one, the reduced elements
// are the rows of row kernels, whose length picks their thread mapping.
bool KeepsAColumnAfterItsReducedDims(const Shape& input, const std::vector<int64_t>& reduced) {
  const int64_t last = *std::max_element(reduced.begin(), reduced.end());
  for (int64_t d = last + 1; d < input.rank(); ++d) {
    if (input.dims[d] > 1) return true;
  }
  return false;
}

// Joins each node to the operands whose dimension 0 it keeps, and lists the uses that need
// an operand's dimension 0 fixed.
void LinkDimZero(const Graph& g, int i, DimZeroSets& sets, std::vector<FixedUse>& fixed,
                 std::vector<FixedNode>& fixed_nodes) {
  const Node& n = g.nodes[i];
  // A scalar has no dimension 0 to share; only a reduce to one reads one.
  if (n.shape.rank() == 0 && ClassOf(n.op) != OpClass::kReduce) return;
  auto keep = [&](int operand) { sets.Join(n.operands[operand], i); };
  auto fix_own = [&](const char* why) {
    if (n.shape.rank() > 0) fixed_nodes.push_back({i, why});
  };
  // The operand's dimension 0 must not vary, and neither can this node's, which comes from
  // the operand's fixed dimensions.
  auto fix = [&](int operand, const char* why) {
    fixed.push_back({i, n.operands[operand], why});
    fix_own("takes its dimension 0 from dimensions that do not vary");
  };
  switch (ClassOf(n.op)) {
    case OpClass::kElementwise:
      for (size_t k = 0; k < n.operands.size(); ++k) keep(static_cast<int>(k));
      return;
    case OpClass::kLeaf:
    case OpClass::kRng:
      return;  // its dimension 0 is its own: it joins what it meets
    case OpClass::kReduce: {
      const bool reduces_dim_zero =
          std::find(n.dimensions.begin(), n.dimensions.end(), 0) != n.dimensions.end();
      if (g.nodes[n.operands[0]].shape.rank() == 0) return;
      if (!reduces_dim_zero) {
        keep(0);
        return;
      }
      fix_own("takes its dimension 0 from a dimension that does not vary");
      if (!KeepsAColumnAfterItsReducedDims(g.nodes[n.operands[0]].shape, n.dimensions)) {
        fix(0, "reduces dimension 0 into rows of varying length");
      }
      return;
    }
    case OpClass::kDataMovement:
      break;
  }
  const std::vector<int64_t>& in = g.nodes[n.operands[0]].shape.dims;
  switch (n.op) {
    case OpCode::kBroadcast:
      // Operand dimension k lands in output dimension dimensions[k]. The operand's dimension
      // 0 may land only in dimension 0; the output's dimension 0 follows the extent when it is
      // the operand's or a new one, and is fixed when it is another operand dimension.
      for (size_t k = 0; k < n.dimensions.size(); ++k) {
        const bool from_zero = k == 0;
        const bool to_zero = n.dimensions[k] == 0;
        if (from_zero && to_zero) keep(0);
        if (from_zero != to_zero)
          fixed.push_back({i, n.operands[0], "moves dimension 0 elsewhere"});
        if (to_zero && !from_zero)
          fix_own("takes its dimension 0 from a dimension that does not vary");
      }
      return;
    case OpCode::kTranspose:
      if (n.dimensions[0] == 0) {
        keep(0);
      } else {
        fix(0, "moves dimension 0 elsewhere");
      }
      return;
    case OpCode::kReshape:
      if (!in.empty() && ReshapeKeepsDimZero(in, n.shape.dims)) {
        keep(0);
      } else {
        fix(0, "does not keep dimension 0 outermost");
      }
      return;
    case OpCode::kSlice:
      // The whole of dimension 0 follows the extent; a slice of its first rows is the same
      // at every extent that has them (ShapeClass::min_extent), and its size is fixed.
      if (n.slice_starts[0] == 0 && n.slice_limits[0] == in[0] && n.slice_strides[0] == 1) {
        keep(0);
      } else {
        fix_own("cuts dimension 0 to a fixed size");
      }
      return;
    case OpCode::kPad:
      if (n.pad_low[0] == 0 && n.pad_high[0] == 0 && n.pad_interior[0] == 0) {
        keep(0);
      } else {
        fix(0, "pads dimension 0");
      }
      return;
    case OpCode::kReverse:
      if (std::find(n.dimensions.begin(), n.dimensions.end(), 0) == n.dimensions.end()) {
        keep(0);
      } else {
        fix(0, "reverses dimension 0");
      }
      return;
    case OpCode::kConcatenate:
      for (size_t k = 0; k < n.operands.size(); ++k) {
        if (n.dimensions[0] != 0) {
          keep(static_cast<int>(k));
        } else {
          fix(static_cast<int>(k), "concatenates along dimension 0");
        }
      }
      return;
    default:
      // A data-movement op without a rule here keeps nothing it could get wrong.
      for (size_t k = 0; k < n.operands.size(); ++k) fix(static_cast<int>(k), "is not generic");
      return;
  }
}

// The extent the named parameters share, or an error naming two that disagree.
StatusOr<int64_t> SharedExtent(const Graph& g, const std::vector<int>& params) {
  int64_t extent = 0;
  int64_t first = -1;
  for (int64_t p : g.outer_parameters) {
    const Node& n = g.nodes[params[p]];
    if (extent == 0) {
      extent = n.shape.dims[0];
      first = p;
    } else if (n.shape.dims[0] != extent) {
      return InvalidArgument("not shape-generic: outer parameters " + std::to_string(first) +
                             " and " + std::to_string(p) + " disagree on the outer extent (" +
                             std::to_string(extent) + " against " +
                             std::to_string(n.shape.dims[0]) + ")");
    }
  }
  return extent;
}

}  // namespace

Bucket BucketOf(int64_t extent) {
  int64_t top = 1;
  while (top < extent) top *= 2;
  return {top / 2 + 1, top};
}

StatusOr<ShapeClass> ClassifyShapes(const Graph& g) {
  if (g.outer_parameters.empty()) {
    return InvalidArgument("not shape-generic: the graph names no outer parameters");
  }
  const std::vector<int> params = g.Parameters();
  ShapeClass c;
  STITCH_ASSIGN_OR_RETURN(c.extent, SharedExtent(g, params));
  DimZeroSets sets(g.nodes.size());
  std::vector<FixedUse> fixed;
  std::vector<FixedNode> fixed_nodes;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    LinkDimZero(g, i, sets, fixed, fixed_nodes);
  }
  std::vector<bool> varying_set(g.nodes.size(), false);
  for (int64_t p : g.outer_parameters) varying_set[sets.Find(params[p])] = true;

  c.factor.assign(g.nodes.size(), 0);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (!varying_set[sets.Find(i)]) continue;
    const Node& n = g.nodes[i];
    if (n.op == OpCode::kConstant && n.literal.size() > 1) {
      return InvalidArgument("not shape-generic: " + Describe(g, i) +
                             " holds one value per element of a varying dimension 0");
    }
    if (n.shape.dims[0] % c.extent != 0) {
      return InvalidArgument("not shape-generic: " + Describe(g, i) + " has dimension 0 of " +
                             std::to_string(n.shape.dims[0]) + ", not a multiple of the outer " +
                             "extent " + std::to_string(c.extent));
    }
    c.factor[i] = n.shape.dims[0] / c.extent;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op == OpCode::kSlice && c.Varies(n.operands[0]) && !c.Varies(static_cast<int>(i))) {
      c.min_extent = std::max(c.min_extent, n.slice_limits[0]);
    }
  }
  for (const FixedNode& f : fixed_nodes) {
    if (c.Varies(f.node)) {
      return InvalidArgument("not shape-generic: " + Describe(g, f.node) + " " + f.why +
                             ", yet meets the outer extent through the ops around it");
    }
  }
  for (const FixedUse& use : fixed) {
    if (c.Varies(use.operand)) {
      return InvalidArgument("not shape-generic: " + Describe(g, use.node) + " " + use.why +
                             " of " + Describe(g, use.operand) + ", which varies with the " +
                             "outer extent");
    }
  }
  return c;
}

Graph AtExtent(const Graph& g, const ShapeClass& shape_class, int64_t extent) {
  Graph out = g;
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    Node& n = out.nodes[i];
    if (!n.slice_limits.empty() && shape_class.Varies(n.operands[0]) &&
        shape_class.Varies(static_cast<int>(i))) {
      n.slice_limits[0] = shape_class.factor[n.operands[0]] * extent;
    }
    if (shape_class.Varies(static_cast<int>(i))) {
      n.shape.dims[0] = shape_class.factor[i] * extent;
    }
  }
  return out;
}

std::vector<int64_t> ParametersWithOuterExtent(const Graph& g, int64_t extent) {
  std::vector<int64_t> out;
  const std::vector<int> params = g.Parameters();
  for (size_t p = 0; p < params.size(); ++p) {
    const Shape& s = g.nodes[static_cast<size_t>(params[p])].shape;
    if (s.rank() > 0 && s.dims[0] == extent) out.push_back(static_cast<int64_t>(p));
  }
  return out;
}

Graph ToShapeClass(const Graph& g, Bucket* served, Status* not_generic) {
  if (g.outer_parameters.empty()) {
    *served = {0, 0};
    return g;
  }
  StatusOr<ShapeClass> c = ClassifyShapes(g);
  if (!c.ok()) {
    if (not_generic) *not_generic = c.status();
    Graph exact = g;
    exact.outer_parameters.clear();
    const int64_t extent = g.nodes[g.Parameters()[g.outer_parameters[0]]].shape.dims[0];
    *served = {extent, extent};
    return exact;
  }
  *served = BucketOf(c->extent);
  served->lo = std::max(served->lo, c->min_extent);
  return AtExtent(g, *c, served->hi);
}

}  // namespace stitch
