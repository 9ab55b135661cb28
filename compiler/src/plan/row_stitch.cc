#include "stitch/compiler/row_stitch.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "stitch/compiler/op_classes.h"

namespace stitch {
namespace {

// How a node is indexed relative to the row a thread group owns.
enum class Access {
  kRowSpace,  // at linear index row * row_len + col: one element of the current row
  kRow,       // at linear index row
  kOther,     // anywhere: fine for values read from global memory, never for a reduce
};

std::string Describe(const Graph& g, int id) {
  return "node " + std::to_string(id) + " '" + g.nodes[id].name + "' (" +
         std::string(OpCodeName(g.nodes[id].op)) + ")";
}

// Returns the access of a broadcast's operand given the broadcast's own access. The operand
// index is the output index divided by the product of the trailing output dimensions it
// does not map, provided the mapped dimensions are a leading block (size-1 ignored).
Access BroadcastOperandAccess(const Graph& g, const Node& n, Access access, int64_t row_len) {
  if (access == Access::kOther) return Access::kOther;
  const std::vector<int64_t>& out = n.shape.dims;
  const std::vector<int64_t>& in = g.nodes[n.operands[0]].shape.dims;
  std::vector<bool> mapped(out.size(), false);
  for (size_t i = 0; i < n.dimensions.size(); ++i) {
    if (in[i] != 1) mapped[static_cast<size_t>(n.dimensions[i])] = true;
  }
  // Mapped dimensions must be in increasing order for the operand's linear index to be a
  // prefix of the output's.
  int64_t last = -1;
  for (size_t i = 0; i < n.dimensions.size(); ++i) {
    if (in[i] == 1) continue;
    if (n.dimensions[i] < last) return Access::kOther;
    last = n.dimensions[i];
  }
  int64_t trailing = 1;
  bool seen_unmapped = false;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (mapped[d]) {
      if (seen_unmapped) return Access::kOther;
    } else {
      seen_unmapped = true;
      trailing *= out[d];
    }
  }
  if (trailing == 1) return access;
  if (access == Access::kRowSpace && trailing == row_len) return Access::kRow;
  return Access::kOther;
}

class Analyzer {
 public:
  Analyzer(const Graph& g, const KernelSpec& spec, RowStitchLayout& layout)
      : g_(g), layout_(layout) {
    in_kernel_.insert(spec.nodes.begin(), spec.nodes.end());
    inputs_.insert(spec.inputs.begin(), spec.inputs.end());
  }

  // Walks everything pass `pass` evaluates from `root` at `access`, checking reduce uses
  // and recording which row-space values each pass reads.
  Status Visit(int root, Access access, int pass) {
    std::vector<std::pair<int, Access>> stack = {{root, access}};
    while (!stack.empty()) {
      auto [id, acc] = stack.back();
      stack.pop_back();
      if (!seen_.insert({id, acc, pass}).second) continue;
      const Node& n = g_.nodes[id];
      if (acc == Access::kRowSpace) passes_[id].insert(pass);
      if (inputs_.count(id) || n.op == OpCode::kParameter) continue;
      if (!in_kernel_.count(id)) {
        if (n.op == OpCode::kConstant || n.op == OpCode::kIota) continue;
        return Unimplemented(Describe(g_, id) + " is neither computed nor read by the kernel");
      }
      if (n.op == OpCode::kReduce) {
        if (acc != Access::kRow) {
          return Unimplemented("reduce " + Describe(g_, id) +
                               " is read at another row than the one it was computed for");
        }
        continue;
      }
      for (size_t i = 0; i < n.operands.size(); ++i) {
        const int o = n.operands[i];
        stack.push_back({o, OperandAccess(n, i, acc)});
      }
    }
    return Status::Ok();
  }

  Access OperandAccess(const Node& n, size_t i, Access acc) const {
    const Shape& os = g_.nodes[n.operands[i]].shape;
    switch (ClassOf(n.op)) {
      case OpClass::kElementwise:
        return os.rank() == 0 && n.shape.rank() > 0 ? Access::kOther : acc;
      case OpClass::kDataMovement:
        if (n.op == OpCode::kReshape) return acc;
        if (n.op == OpCode::kBroadcast) {
          return BroadcastOperandAccess(g_, n, acc, layout_.geometry.row_len);
        }
        return Access::kOther;
      default:
        return Access::kOther;
    }
  }

  const std::map<int, std::set<int>>& passes() const { return passes_; }

 private:
  const Graph& g_;
  RowStitchLayout& layout_;
  std::set<int> in_kernel_, inputs_;
  std::set<std::tuple<int, Access, int>> seen_;
  std::map<int, std::set<int>> passes_;  // row-space node -> passes that read it
};

// Returns the reduces of the kernel each reduce reads (through in-kernel nodes).
std::map<int, std::set<int>> ReduceDependences(const Graph& g, const KernelSpec& spec,
                                               const std::vector<int>& reduces) {
  std::set<int> in_kernel(spec.nodes.begin(), spec.nodes.end());
  std::map<int, std::set<int>> deps;
  for (int r : reduces) {
    std::set<int> seen;
    std::vector<int> stack = {g.nodes[r].operands[0]};
    while (!stack.empty()) {
      int id = stack.back();
      stack.pop_back();
      if (!in_kernel.count(id) || !seen.insert(id).second) continue;
      if (g.nodes[id].op == OpCode::kReduce) {
        deps[r].insert(id);
        continue;
      }
      for (int o : g.nodes[id].operands) stack.push_back(o);
    }
  }
  return deps;
}

}  // namespace

std::optional<RowGeometry> RowGeometryOf(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.op != OpCode::kReduce) return std::nullopt;
  if (ClassifyNode(g, id) != OpKind::kRowReduce) return std::nullopt;
  const Shape& in = g.nodes[n.operands[0]].shape;
  int64_t row_len = 1;
  for (int64_t d : n.dimensions) row_len *= in.dims[static_cast<size_t>(d)];
  if (row_len < 2) return std::nullopt;
  return RowGeometry{in.elements() / row_len, row_len};
}

StatusOr<RowStitchLayout> AnalyzeRowStitch(const Graph& g, const KernelSpec& spec) {
  RowStitchLayout layout;
  std::vector<int> reduces;
  for (int id : spec.nodes) {
    if (g.nodes[id].op == OpCode::kReduce) reduces.push_back(id);
  }
  if (reduces.empty()) return Unimplemented("a row-stitched kernel needs a reduce");
  for (int r : reduces) {
    std::optional<RowGeometry> geo = RowGeometryOf(g, r);
    if (!geo) return Unimplemented("reduce " + Describe(g, r) + " is not a row reduction");
    if (r == reduces.front()) layout.geometry = *geo;
    if (!(*geo == layout.geometry)) {
      return Unimplemented("reduce " + Describe(g, r) + " has another row geometry");
    }
  }
  const RowGeometry& geo = layout.geometry;
  for (int o : spec.outputs) {
    const int64_t count = g.nodes[o].shape.elements();
    if (count == geo.rows * geo.row_len) {
      layout.row_space_outputs.push_back(o);
    } else if (count == geo.rows) {
      layout.row_outputs.push_back(o);
    } else {
      layout.independent_outputs.push_back(o);
    }
  }

  // Phases: a reduce runs one pass after the latest reduce it reads.
  std::map<int, std::set<int>> deps = ReduceDependences(g, spec, reduces);
  std::map<int, int> phase;
  for (int r : reduces) {  // spec.nodes is topological, so dependences come first
    int p = 0;
    for (int d : deps[r]) p = std::max(p, phase[d] + 1);
    phase[r] = p;
    if (static_cast<int>(layout.phases.size()) <= p) layout.phases.resize(p + 1);
    layout.phases[p].push_back(r);
  }

  Analyzer analyzer(g, spec, layout);
  for (size_t p = 0; p < layout.phases.size(); ++p) {
    for (int r : layout.phases[p]) {
      STITCH_RETURN_IF_ERROR(
          analyzer.Visit(g.nodes[r].operands[0], Access::kRowSpace, static_cast<int>(p)));
      STITCH_RETURN_IF_ERROR(
          analyzer.Visit(g.nodes[r].operands[1], Access::kOther, static_cast<int>(p)));
    }
  }
  const int final_pass = static_cast<int>(layout.phases.size());
  for (int o : layout.row_space_outputs) {
    STITCH_RETURN_IF_ERROR(analyzer.Visit(o, Access::kRowSpace, final_pass));
  }
  for (int o : layout.row_outputs) {
    STITCH_RETURN_IF_ERROR(analyzer.Visit(o, Access::kRow, final_pass));
  }
  // Independent outputs are indexed by their own position: a reduce reached from them
  // would be read at an arbitrary row, which the visit rejects.
  for (int o : layout.independent_outputs) {
    STITCH_RETURN_IF_ERROR(analyzer.Visit(o, Access::kOther, final_pass + 1));
  }

  std::set<int> inputs(spec.inputs.begin(), spec.inputs.end());
  for (const auto& [id, passes] : analyzer.passes()) {
    if (passes.size() < 2) continue;
    const bool loaded = inputs.count(id) || g.nodes[id].op == OpCode::kParameter;
    if (!loaded && !IsHeavy(g.nodes[id].op)) continue;
    if (g.nodes[id].shape.elements() != geo.rows * geo.row_len) continue;
    layout.cached.push_back(id);
    layout.cached_first_pass.push_back(*passes.begin());
  }
  return layout;
}

}  // namespace stitch
