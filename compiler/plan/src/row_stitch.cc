#include "stitch/plan/row_stitch.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "stitch/plan/op_classes.h"

namespace stitch {
namespace {

// How a node is indexed relative to the row a thread group owns.
enum class Access {
  kRowSpace,  // at linear index row * row_len + col: one element of the current row
  kRow,       // at linear index row
  kColumn,    // at linear index col: a column output's element
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
  // Visits do not look into the nodes of `stops` (values kept in registers).
  Analyzer(const Graph& g, const KernelSpec& spec, const RowStitchLayout& layout,
           std::set<int> stops = {})
      : g_(g), layout_(layout), stops_(std::move(stops)) {
    in_kernel_.insert(spec.nodes.begin(), spec.nodes.end());
    inputs_.insert(spec.inputs.begin(), spec.inputs.end());
    column_reduces_.insert(layout.column_reduces.begin(), layout.column_reduces.end());
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
      accesses_[id].insert(acc);
      if (acc == Access::kRow) row_passes_[id].insert(pass);
      if (inputs_.count(id) || n.op == OpCode::kParameter || stops_.count(id)) continue;
      if (!in_kernel_.count(id)) {
        if (n.op == OpCode::kConstant || n.op == OpCode::kIota) continue;
        return Unimplemented(Describe(g_, id) + " is neither computed nor read by the kernel");
      }
      if (column_reduces_.count(id)) {
        // Its result exists only after the grid has combined every block's partials.
        if (acc != Access::kColumn) {
          return Unimplemented("column reduce " + Describe(g_, id) +
                               " is read other than by a column output at its own column");
        }
        continue;
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
    // Column results are seeded at the output's own linear index, which only elementwise
    // ops pass on unchanged.
    if (acc == Access::kColumn) {
      const bool same = ClassOf(n.op) == OpClass::kElementwise && os.dims == n.shape.dims;
      return same ? Access::kColumn : Access::kOther;
    }
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

  const Graph& graph() const { return g_; }
  const std::map<int, std::set<int>>& passes() const { return passes_; }
  const std::map<int, std::set<Access>>& accesses() const { return accesses_; }
  // The passes that read `id` at the current row, in increasing order.
  std::vector<int> RowPasses(int id) const {
    auto it = row_passes_.find(id);
    return it == row_passes_.end() ? std::vector<int>{}
                                   : std::vector<int>(it->second.begin(), it->second.end());
  }

 private:
  const Graph& g_;
  const RowStitchLayout& layout_;
  std::set<int> in_kernel_, inputs_, column_reduces_, stops_;
  std::set<std::tuple<int, Access, int>> seen_;
  std::map<int, std::set<int>> passes_;       // row-space node -> passes that read it
  std::map<int, std::set<Access>> accesses_;  // every node visited -> how it is indexed
  std::map<int, std::set<int>> row_passes_;   // node -> passes that read it at the current row
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

// Whether computing `id` inside the kernel reads one of `targets` (through in-kernel nodes).
bool Reaches(const Graph& g, const std::set<int>& in_kernel, int id, const std::set<int>& targets) {
  std::vector<int> stack = {id};
  std::set<int> seen;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (!in_kernel.count(n) || !seen.insert(n).second) continue;
    if (targets.count(n)) return true;
    for (int o : g.nodes[n].operands) stack.push_back(o);
  }
  return false;
}

// Whether computing `id` inside the kernel loads from memory: it is a kernel input or a
// parameter, or reads one through in-kernel nodes.
bool ReadsMemory(const Graph& g, const std::set<int>& in_kernel, const std::set<int>& inputs,
                 int id) {
  std::vector<int> stack = {id};
  std::set<int> seen;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (inputs.count(n) || g.nodes[n].op == OpCode::kParameter) return true;
    if (!in_kernel.count(n)) continue;
    for (int o : g.nodes[n].operands) stack.push_back(o);
  }
  return false;
}

// Records in `layout` the row invariants of a visited kernel: the outermost nodes read only
// at the current row that load from memory and read none of the kernel's reduces.
void FindRowInvariants(const Graph& g, const KernelSpec& spec, const Analyzer& analyzer,
                       RowStitchLayout& layout) {
  const std::set<int> in_kernel(spec.nodes.begin(), spec.nodes.end());
  const std::set<int> inputs(spec.inputs.begin(), spec.inputs.end());
  std::set<int> reduces;
  for (int id : spec.nodes) {
    if (g.nodes[id].op == OpCode::kReduce) reduces.insert(id);
  }
  std::set<int> candidates;
  for (const auto& [id, accesses] : analyzer.accesses()) {
    const OpCode op = g.nodes[id].op;
    if (accesses != std::set<Access>{Access::kRow} || op == OpCode::kReduce ||
        Reaches(g, in_kernel, id, reduces) || !ReadsMemory(g, in_kernel, inputs, id)) {
      continue;
    }
    candidates.insert(id);
  }
  // A candidate read only by other candidates is computed within them.
  std::set<int> inner;
  for (int id : candidates) inner.insert(id);
  for (int c : spec.nodes) {
    if (!analyzer.accesses().count(c) || candidates.count(c)) continue;
    for (int o : g.nodes[c].operands) inner.erase(o);
  }
  for (int o : spec.outputs) inner.erase(o);
  for (int id : candidates) {
    if (inner.count(id)) continue;
    layout.row_invariants.push_back(id);
    layout.row_invariant_passes.push_back(analyzer.RowPasses(id));
  }
}

// Visits everything each pass of `layout` evaluates, in pass order: each phase's reduces,
// then the output pass.
Status VisitPasses(const RowStitchLayout& layout, Analyzer& analyzer) {
  const Graph& g = analyzer.graph();
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
  // Column reduces accumulate in the output pass, where the row's reduce results are known.
  for (int r : layout.column_reduces) {
    STITCH_RETURN_IF_ERROR(analyzer.Visit(g.nodes[r].operands[0], Access::kRowSpace, final_pass));
    STITCH_RETURN_IF_ERROR(analyzer.Visit(g.nodes[r].operands[1], Access::kOther, final_pass));
  }
  for (int o : layout.column_outputs) {
    STITCH_RETURN_IF_ERROR(analyzer.Visit(o, Access::kColumn, final_pass + 2));
  }
  // Independent outputs are indexed by their own position: a reduce reached from them
  // would be read at an arbitrary row, which the visit rejects.
  for (int o : layout.independent_outputs) {
    STITCH_RETURN_IF_ERROR(analyzer.Visit(o, Access::kOther, final_pass + 1));
  }
  return Status::Ok();
}

// The one consumer that every pass after the first that reads `x` reads it through, when
// there is one: an elementwise node of the row space, no wider in registers, that first
// runs in x's first pass and runs in every pass that reads x.
std::optional<int> ReadOnlyThrough(const Graph& g, const KernelSpec& spec,
                                   const RowStitchLayout& layout,
                                   const std::map<int, std::set<int>>& passes, int x) {
  const std::set<int>& read = passes.at(x);
  const int64_t space = layout.geometry.rows * layout.geometry.row_len;
  const int64_t x_bytes = std::max<int64_t>(DTypeBytes(g.nodes[x].shape.dtype), 4);
  for (int n : spec.nodes) {
    const Node& node = g.nodes[n];
    if (ClassOf(node.op) != OpClass::kElementwise || node.shape.elements() != space ||
        DTypeBytes(node.shape.dtype) > x_bytes ||
        std::find(node.operands.begin(), node.operands.end(), x) == node.operands.end()) {
      continue;
    }
    auto computed = passes.find(n);
    if (computed == passes.end() || *computed->second.begin() != *read.begin() ||
        !std::includes(computed->second.begin(), computed->second.end(), read.begin(),
                       read.end())) {
      continue;
    }
    Analyzer without(g, spec, layout, {n});
    if (!VisitPasses(layout, without).ok()) continue;
    auto elsewhere = without.passes().find(x);
    if (elsewhere == without.passes().end() || *elsewhere->second.rbegin() == *read.begin()) {
      return n;
    }
  }
  return std::nullopt;
}

// Records in `layout` what a thread keeps for its cached values: each cached value, or the
// consumer every later pass reads it through (ReadOnlyThrough, followed as far as it goes),
// each once.
void FindKept(const Graph& g, const KernelSpec& spec, const std::map<int, std::set<int>>& passes,
              RowStitchLayout& layout) {
  std::set<int> kept;
  for (int x : layout.cached) {
    int value = x;
    while (std::optional<int> through = ReadOnlyThrough(g, spec, layout, passes, value)) {
      value = *through;
    }
    if (!kept.insert(value).second) continue;
    layout.kept.push_back(value);
    layout.kept_first_pass.push_back(*passes.at(value).begin());
  }
}

// Records in `layout` the last pass that reads each kept value: pass p reads the kept values
// of earlier passes (it does not look into them) and computes its own.
void FindKeptLastPasses(const Graph& g, const KernelSpec& spec, RowStitchLayout& layout) {
  layout.kept_last_pass = layout.kept_first_pass;
  const int final_pass = static_cast<int>(layout.phases.size());
  for (int p = 1; p <= final_pass; ++p) {
    std::set<int> read_back;
    for (size_t c = 0; c < layout.kept.size(); ++c) {
      if (layout.kept_first_pass[c] < p) read_back.insert(layout.kept[c]);
    }
    Analyzer analyzer(g, spec, layout, read_back);
    // Stopping at more nodes than the kernel's own visit, which succeeded, cannot fail.
    if (!VisitPasses(layout, analyzer).ok()) continue;
    for (size_t c = 0; c < layout.kept.size(); ++c) {
      auto it = analyzer.passes().find(layout.kept[c]);
      if (it != analyzer.passes().end() && it->second.count(p)) layout.kept_last_pass[c] = p;
    }
  }
}

// Splits the kernel's reduces into row reduces of one geometry (set in `layout`) and column
// reduces of that geometry.
Status ClassifyReduces(const Graph& g, const std::vector<int>& reduces, RowStitchLayout& layout,
                       std::vector<int>& row_reduces) {
  std::optional<RowGeometry> first;
  for (int r : reduces) {
    if ((first = RowGeometryOf(g, r))) break;
  }
  if (!first) {
    return Unimplemented("reduce " + Describe(g, reduces.front()) + " is not a row reduction");
  }
  layout.geometry = *first;
  for (int r : reduces) {
    std::optional<RowGeometry> geo = RowGeometryOf(g, r);
    if (geo && *geo == layout.geometry) {
      row_reduces.push_back(r);
    } else if (IsColumnReduceOf(g, r, layout.geometry)) {
      layout.column_reduces.push_back(r);
    } else if (geo) {
      return Unimplemented("reduce " + Describe(g, r) + " has another row geometry");
    } else {
      return Unimplemented("reduce " + Describe(g, r) +
                           " is neither a row reduction nor a column reduction of its rows");
    }
  }
  return Status::Ok();
}

// Follows `id` through converts, broadcasts and reshapes, which change neither which row
// a value belongs to nor its order.
int SkipRelayouts(const Graph& g, int id) {
  for (;;) {
    const Node& n = g.nodes[id];
    if (n.op != OpCode::kConvert && n.op != OpCode::kBroadcast && n.op != OpCode::kReshape) {
      return id;
    }
    id = n.operands[0];
  }
}

// The sums among `row_reduces` of exp(x - m) with m a max among them over the same x.
std::vector<RescaledSum> FindRescaledSums(const Graph& g, const std::vector<int>& row_reduces) {
  const std::set<int> reduces(row_reduces.begin(), row_reduces.end());
  std::vector<RescaledSum> out;
  for (int r : row_reduces) {
    const Node& sum = g.nodes[r];
    if (sum.reduce_kind != ReduceKind::kSum || !IsFloat(sum.shape.dtype)) continue;
    int e = sum.operands[0];
    while (g.nodes[e].op == OpCode::kConvert) e = g.nodes[e].operands[0];
    if (g.nodes[e].op != OpCode::kExp) continue;
    const Node& shifted = g.nodes[g.nodes[e].operands[0]];
    if (shifted.op != OpCode::kSub) continue;
    const int m = SkipRelayouts(g, shifted.operands[1]);
    const Node& max = g.nodes[m];
    if (!reduces.count(m) || max.reduce_kind != ReduceKind::kMax || !IsFloat(max.shape.dtype) ||
        max.operands[0] != shifted.operands[0]) {
      continue;
    }
    out.push_back({m, r});
  }
  return out;
}

}  // namespace

bool InOnePass(const RowStitchLayout& layout, const RescaledSum& s) {
  for (const std::vector<int>& phase : layout.phases) {
    const bool has_max = std::count(phase.begin(), phase.end(), s.max_reduce) > 0;
    const bool has_sum = std::count(phase.begin(), phase.end(), s.sum_reduce) > 0;
    if (has_max || has_sum) return has_max && has_sum;
  }
  return false;
}

bool IsColumnReduceOf(const Graph& g, int id, const RowGeometry& geo) {
  const Node& n = g.nodes[id];
  if (n.op != OpCode::kReduce || n.operands.empty()) return false;
  const Shape& in = g.nodes[n.operands[0]].shape;
  if (in.elements() != geo.rows * geo.row_len || n.shape.elements() != geo.row_len) return false;
  // Input element (row, col) is then at linear index row * row_len + col, and col is the
  // output index.
  return ReducesLeadingDims(g, id);
}

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

StatusOr<RowStitchLayout> AnalyzeRowStitch(const Graph& g, const KernelSpec& spec,
                                           const ShapeClass* shape_class) {
  RowStitchLayout layout;
  std::vector<int> reduces;
  for (int id : spec.nodes) {
    if (g.nodes[id].op == OpCode::kReduce) reduces.push_back(id);
  }
  if (reduces.empty()) return Unimplemented("a row-stitched kernel needs a reduce");
  std::vector<int> row_reduces;
  STITCH_RETURN_IF_ERROR(ClassifyReduces(g, reduces, layout, row_reduces));
  const RowGeometry& geo = layout.geometry;
  const std::set<int> in_kernel(spec.nodes.begin(), spec.nodes.end());
  const std::set<int> column_reduces(layout.column_reduces.begin(), layout.column_reduces.end());
  // Whether output `o` follows the extent as the rows do (always, for an exact graph).
  const int row_space = g.nodes[row_reduces.front()].operands[0];
  auto follows_rows = [&](int o) {
    return shape_class == nullptr || shape_class->Varies(o) == shape_class->Varies(row_space);
  };
  for (int o : spec.outputs) {
    const int64_t count = g.nodes[o].shape.elements();
    if (!column_reduces.empty() && Reaches(g, in_kernel, o, column_reduces)) {
      if (count != geo.row_len) {
        return Unimplemented("output " + Describe(g, o) + " reads a column reduce but has " +
                             std::to_string(count) + " elements, not the row length " +
                             std::to_string(geo.row_len));
      }
      layout.column_outputs.push_back(o);
    } else if (count == geo.rows * geo.row_len && follows_rows(o)) {
      layout.row_space_outputs.push_back(o);
    } else if (count == geo.rows && follows_rows(o)) {
      layout.row_outputs.push_back(o);
    } else {
      layout.independent_outputs.push_back(o);
    }
  }

  // Phases: a reduce runs one pass after the latest reduce it reads, a rescaled sum in one
  // pass with its max where the mapping asks for it.
  std::map<int, std::set<int>> deps = ReduceDependences(g, spec, row_reduces);
  layout.rescaled_sums = FindRescaledSums(g, row_reduces);
  std::map<int, int> max_of_sum;
  if (spec.mapping.rescaled_sums_in_one_pass) {
    for (const RescaledSum& s : layout.rescaled_sums) max_of_sum[s.sum_reduce] = s.max_reduce;
  }
  std::map<int, int> phase;
  for (int r : row_reduces) {  // spec.nodes is topological, so dependences come first
    int p = 0;
    for (int d : deps[r]) {
      auto it = max_of_sum.find(r);
      p = std::max(p, phase[d] + (it != max_of_sum.end() && it->second == d ? 0 : 1));
    }
    phase[r] = p;
    if (static_cast<int>(layout.phases.size()) <= p) layout.phases.resize(p + 1);
    layout.phases[p].push_back(r);
  }

  Analyzer analyzer(g, spec, layout);
  STITCH_RETURN_IF_ERROR(VisitPasses(layout, analyzer));
  FindRowInvariants(g, spec, analyzer, layout);
  std::set<int> inputs(spec.inputs.begin(), spec.inputs.end());
  for (const auto& [id, passes] : analyzer.passes()) {
    if (passes.size() < 2) continue;
    const bool loaded = inputs.count(id) || g.nodes[id].op == OpCode::kParameter;
    if (!loaded && !IsHeavy(g.nodes[id].op)) continue;
    if (g.nodes[id].shape.elements() != geo.rows * geo.row_len) continue;
    layout.cached.push_back(id);
    layout.cached_first_pass.push_back(*passes.begin());
    layout.cached_pass_count.push_back(static_cast<int>(passes.size()));
  }
  FindKept(g, spec, analyzer.passes(), layout);
  FindKeptLastPasses(g, spec, layout);
  return layout;
}

int64_t KeptValueBytes(DType dtype) {
  switch (dtype) {
    case DType::kPred:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 4;
    default:
      return DTypeBytes(dtype);
  }
}

SharedRowRegions SharedRowRegionsOf(const Graph& g, const RowStitchLayout& layout) {
  struct Region {
    int64_t offset, element_bytes;
    int holder_last_pass;
  };
  std::vector<size_t> order(layout.kept.size());
  for (size_t c = 0; c < order.size(); ++c) order[c] = c;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layout.kept_first_pass[a] < layout.kept_first_pass[b];
  });
  SharedRowRegions out;
  out.offsets.assign(layout.kept.size(), 0);
  std::vector<Region> regions;
  for (size_t c : order) {
    const int64_t element_bytes = KeptValueBytes(g.nodes[layout.kept[c]].shape.dtype);
    auto free = std::find_if(regions.begin(), regions.end(), [&](const Region& r) {
      return r.element_bytes == element_bytes && r.holder_last_pass <= layout.kept_first_pass[c];
    });
    if (free == regions.end()) {
      const int64_t offset = (out.bytes + 15) / 16 * 16;
      regions.push_back({offset, element_bytes, 0});
      out.bytes = offset + layout.geometry.row_len * element_bytes;
      free = regions.end() - 1;
    }
    free->holder_last_pass = layout.kept_last_pass[c];
    out.offsets[c] = free->offset;
  }
  return out;
}

}  // namespace stitch
