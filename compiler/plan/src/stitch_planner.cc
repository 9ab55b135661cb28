#include "stitch/plan/stitch_planner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/op_classes.h"
#include "stitch/plan/row_stitch.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace {

// The search's work: merge and join evaluations, counted rather than timed so that a plan,
// and the savings priced from it, are the same on a busy node as on an idle one.
class SearchBudget {
 public:
  explicit SearchBudget(int64_t evaluations) : left_(evaluations) {}
  // Takes one evaluation; false when none is left.
  bool Spend() {
    if (left_ <= 0) return false;
    --left_;
    return true;
  }
  bool exhausted() const { return left_ <= 0; }
  int64_t left() const { return left_; }

 private:
  int64_t left_;
};

// Plans with more kernels than this search greedily (a beam of one), so the search stays
// within its budget on graphs of thousands of nodes.
constexpr size_t kGreedyAbove = 64;

struct Kernel {
  KernelSpec spec;
  double seconds = 0;
};

// The name of phase `p` of global kernel `global`.
std::string PhaseName(const KernelSpec& global, size_t p) {
  return global.name + "_p" + std::to_string(p) + "_" +
         std::string(KernelKindName(global.phases[p].kind));
}

// Each node's place in the graph's topological order.
std::vector<int> TopologicalRanks(const Graph& g) {
  std::vector<int> rank(g.nodes.size(), 0);
  const std::vector<int> topo = TopologicalOrder(g);
  for (size_t k = 0; k < topo.size(); ++k) rank[topo[k]] = static_cast<int>(k);
  return rank;
}

// A global kernel running `phases` in order: its outputs are theirs, its inputs what no
// earlier phase writes; its nodes and inputs in the order of `rank`.
KernelSpec GlobalKernelOf(const std::vector<int>& rank, std::vector<KernelSpec> phases) {
  const auto by_rank = [&](int x, int y) { return rank[x] < rank[y]; };
  KernelSpec global;
  global.kind = KernelKind::kGlobalStitch;
  std::set<int> written, nodes;
  std::set<int> inputs;
  for (const KernelSpec& p : phases) {
    for (int i : p.inputs) {
      if (!written.count(i)) inputs.insert(i);
    }
    for (int o : p.outputs) {
      written.insert(o);
      global.outputs.push_back(o);
    }
    nodes.insert(p.nodes.begin(), p.nodes.end());
  }
  // A phase may recompute a value another kernel materialises and a later phase reads:
  // the kernel then lists it as an input only.
  for (int i : inputs) nodes.erase(i);
  global.nodes.assign(nodes.begin(), nodes.end());
  std::sort(global.nodes.begin(), global.nodes.end(), by_rank);
  global.inputs.assign(inputs.begin(), inputs.end());
  std::sort(global.inputs.begin(), global.inputs.end(), by_rank);
  global.phases = std::move(phases);
  return global;
}

// A global kernel of `phases` scheduled for `device`; nullopt where they cannot share a
// launch.
std::optional<KernelSpec> ScheduledGlobalKernelOf(const Graph& g, const std::vector<int>& rank,
                                                  std::vector<KernelSpec> phases,
                                                  const GpuDevice& device) {
  KernelSpec global = GlobalKernelOf(rank, std::move(phases));
  if (!ScheduleKernel(g, global, device).ok()) return std::nullopt;
  return global;
}

// `a`, then `b`, as one global kernel scheduled for `device` (a global kernel's phases join
// as they are); nullopt where either is a transpose tile or they cannot share a launch.
std::optional<KernelSpec> JoinKernels(const Graph& g, const std::vector<int>& rank,
                                      const KernelSpec& a, const KernelSpec& b,
                                      const GpuDevice& device) {
  // A transpose tile needs a launch of its own: a global kernel's loop phase walks its
  // elements in order.
  if (a.mapping.transpose_tile >= 0 || b.mapping.transpose_tile >= 0) return std::nullopt;
  std::vector<KernelSpec> phases;
  for (const KernelSpec* k : {&a, &b}) {
    if (k->kind == KernelKind::kGlobalStitch) {
      phases.insert(phases.end(), k->phases.begin(), k->phases.end());
    } else {
      phases.push_back(*k);
    }
  }
  return ScheduledGlobalKernelOf(g, rank, std::move(phases), device);
}

struct State {
  std::vector<Kernel> kernels;
  double seconds = 0;
};

class Planner {
 public:
  Planner(const Graph& g, const GpuDevice& device, const FusionRules& rules)
      : g_(g), device_(device), rules_(rules), model_(NewPlanningCostModel(device)) {
    rank_ = TopologicalRanks(g);
    graph_outputs_.insert(g.outputs.begin(), g.outputs.end());
  }

  // The baseline's kernels, with its multi-output loop kernels split into one kernel per
  // output: merges then put each output with the kernel it belongs with, and outputs left
  // over share a launch again through merges of equal-size loops.
  StatusOr<State> Initial(const FusionPlan& baseline) {
    State s;
    std::vector<KernelSpec> specs;
    for (const KernelSpec& k : baseline.kernels) {
      if (k.kind != KernelKind::kLoop || k.outputs.size() == 1) {
        specs.push_back(k);
        continue;
      }
      for (int o : k.outputs) {
        KernelSpec one;
        one.kind = KernelKind::kLoop;
        one.outputs = {o};
        CollectBody(one, [&](int node) { return g_.nodes[node].op == OpCode::kReduce; });
        specs.push_back(std::move(one));
      }
    }
    for (KernelSpec spec : specs) {
      STITCH_RETURN_IF_ERROR(ScheduleKernel(g_, spec, device_));
      double seconds = model_->EstimateKernel(g_, spec).seconds;
      s.kernels.push_back({std::move(spec), seconds});
      s.seconds += seconds;
    }
    return s;
  }

  // A merge candidate: kernels a and b of a state and the kernel they become.
  struct Candidate {
    size_t a = 0, b = 0;
    Kernel merged;
    double gain = 0;  // seconds saved
  };

  // Returns the legal merges of `s`, best first, evaluating while `budget` lasts.
  std::vector<Candidate> Candidates(const State& s, SearchBudget& budget) {
    const Index index = BuildIndex(s);
    std::vector<Candidate> out;
    for (auto [a, b] : RelatedPairs(s, index)) {
      if (!budget.Spend()) break;
      std::optional<Kernel> merged = Merge(s, index, a, b);
      if (!merged) continue;
      const double gain = s.kernels[a].seconds + s.kernels[b].seconds - merged->seconds;
      out.push_back({a, b, std::move(*merged), gain});
    }
    std::sort(out.begin(), out.end(),
              [](const Candidate& x, const Candidate& y) { return x.gain > y.gain; });
    return out;
  }

  // Returns `s` with candidate `c` applied.
  static State Apply(const State& s, Candidate c) {
    State next;
    next.seconds = c.merged.seconds;
    for (size_t k = 0; k < s.kernels.size(); ++k) {
      if (k == c.a || k == c.b) continue;
      next.kernels.push_back(s.kernels[k]);
      next.seconds += s.kernels[k].seconds;
    }
    next.kernels.push_back(std::move(c.merged));
    return next;
  }

  // Applies, in order, every improving candidate whose kernels no earlier one touched and
  // that is still legal in the state reached so far: one greedy step that merges many
  // disjoint pairs, so plans of thousands of kernels take few steps.
  State ApplyDisjoint(const State& s, std::vector<Candidate> candidates) {
    State current = s;
    std::set<std::vector<int>> touched;
    for (Candidate& c : candidates) {
      if (c.gain <= 0) break;
      const std::vector<int>& oa = s.kernels[c.a].spec.outputs;
      const std::vector<int>& ob = s.kernels[c.b].spec.outputs;
      if (touched.count(oa) || touched.count(ob)) continue;
      // Find the two kernels in the current state and re-check the merge there.
      size_t a = current.kernels.size(), b = a;
      for (size_t k = 0; k < current.kernels.size(); ++k) {
        if (current.kernels[k].spec.outputs == oa) a = k;
        if (current.kernels[k].spec.outputs == ob) b = k;
      }
      if (a == current.kernels.size() || b == current.kernels.size()) continue;
      const Index index = BuildIndex(current);
      std::optional<Kernel> merged = Merge(current, index, a, b);
      if (!merged) continue;
      const double gain = current.kernels[a].seconds + current.kernels[b].seconds - merged->seconds;
      if (gain <= 0) continue;
      touched.insert(oa);
      touched.insert(ob);
      current = Apply(current, {a, b, std::move(*merged), gain});
    }
    return current;
  }

  // Orders kernels so producers come first, names them and records their stitched edges.
  StatusOr<FusionPlan> Finish(State s, SearchBudget budget) {
    FusionPlan plan;
    plan.planner = "stitch";
    std::vector<std::set<int>> succ = BuildIndex(s).succ;
    std::vector<int> indegree(s.kernels.size(), 0);
    for (const auto& out : succ) {
      for (int k : out) ++indegree[k];
    }
    std::vector<size_t> ready;
    for (size_t k = 0; k < s.kernels.size(); ++k) {
      if (indegree[k] == 0) ready.push_back(k);
    }
    while (!ready.empty()) {
      // Among ready kernels, keep the order of their first output for stable plans.
      auto it = std::min_element(ready.begin(), ready.end(), [&](size_t x, size_t y) {
        return rank_[s.kernels[x].spec.outputs[0]] < rank_[s.kernels[y].spec.outputs[0]];
      });
      size_t k = *it;
      ready.erase(it);
      plan.kernels.push_back(s.kernels[k].spec);
      for (int next : succ[k]) {
        if (--indegree[next] == 0) ready.push_back(static_cast<size_t>(next));
      }
    }
    if (plan.kernels.size() != s.kernels.size()) {
      return Internal("the stitched plan of graph '" + g_.name + "' has a cycle between kernels");
    }
    if (rules_.global_stitch) plan.kernels = FormGlobalKernels(std::move(plan.kernels), budget);
    for (size_t k = 0; k < plan.kernels.size(); ++k) {
      KernelSpec& spec = plan.kernels[k];
      spec.name = "stitch_k" + std::to_string(k) + "_" + std::string(KernelKindName(spec.kind));
      RecordEdges(spec);
    }
    return plan;
  }

  static std::string Signature(const State& s) {
    std::vector<std::vector<int>> outs;
    for (const Kernel& k : s.kernels) outs.push_back(k.spec.outputs);
    std::sort(outs.begin(), outs.end());
    std::string sig;
    for (const auto& o : outs) {
      for (int id : o) sig += std::to_string(id) + ",";
      sig += ";";
    }
    return sig;
  }

 private:
  // Who writes and reads each buffer in a state, and the kernels' dependence order.
  struct Index {
    std::map<int, int> writer;                // node -> kernel writing it
    std::map<int, std::vector<int>> readers;  // node -> kernels reading it
    std::vector<std::set<int>> succ;          // kernel -> kernels reading its outputs
    std::vector<int> position;                // a topological position of each kernel
  };

  Index BuildIndex(const State& s) const {
    Index ix;
    const size_t n = s.kernels.size();
    for (size_t k = 0; k < n; ++k) {
      for (int o : s.kernels[k].spec.outputs) ix.writer[o] = static_cast<int>(k);
    }
    ix.succ.assign(n, {});
    std::vector<int> indegree(n, 0);
    for (size_t k = 0; k < n; ++k) {
      for (int i : s.kernels[k].spec.inputs) {
        ix.readers[i].push_back(static_cast<int>(k));
        auto w = ix.writer.find(i);
        if (w != ix.writer.end() && w->second != static_cast<int>(k) &&
            ix.succ[w->second].insert(static_cast<int>(k)).second) {
          ++indegree[k];
        }
      }
    }
    ix.position.assign(n, 0);
    std::vector<int> ready;
    for (size_t k = 0; k < n; ++k) {
      if (indegree[k] == 0) ready.push_back(static_cast<int>(k));
    }
    int next = 0;
    while (!ready.empty()) {
      int k = ready.back();
      ready.pop_back();
      ix.position[k] = next++;
      for (int m : ix.succ[k]) {
        if (--indegree[m] == 0) ready.push_back(m);
      }
    }
    return ix;
  }

  // Pairs worth merging: one feeds the other, or both read the same non-scalar buffer (a
  // merge then reads it once; readers are paired with their neighbour in dependence order
  // only, so a buffer read by many kernels does not make the search quadratic).
  std::vector<std::pair<size_t, size_t>> RelatedPairs(const State& s, const Index& ix) const {
    std::set<std::pair<size_t, size_t>> pairs;
    auto add = [&](int x, int y) {
      if (x == y) return;
      pairs.insert({static_cast<size_t>(std::min(x, y)), static_cast<size_t>(std::max(x, y))});
    };
    for (size_t k = 0; k < s.kernels.size(); ++k) {
      for (int m : ix.succ[k]) add(static_cast<int>(k), m);
    }
    // Loops of equal size can always share a launch (the independent scheme).
    std::map<int64_t, std::vector<int>> loops_by_size;
    for (size_t k = 0; k < s.kernels.size(); ++k) {
      const KernelSpec& spec = s.kernels[k].spec;
      if (spec.kind == KernelKind::kLoop) {
        loops_by_size[g_.nodes[spec.outputs[0]].shape.elements()].push_back(static_cast<int>(k));
      }
    }
    for (auto& [size, loops] : loops_by_size) {
      std::sort(loops.begin(), loops.end(),
                [&](int x, int y) { return ix.position[x] < ix.position[y]; });
      for (size_t i = 1; i < loops.size(); ++i) add(loops[i - 1], loops[i]);
    }
    for (const auto& [node, readers] : ix.readers) {
      if (g_.nodes[node].shape.rank() == 0 || readers.size() < 2) continue;
      std::vector<int> by_position = readers;
      std::sort(by_position.begin(), by_position.end(),
                [&](int x, int y) { return ix.position[x] < ix.position[y]; });
      for (size_t i = 1; i < by_position.size(); ++i) add(by_position[i - 1], by_position[i]);
    }
    return {pairs.begin(), pairs.end()};
  }

  // The merged kernel of a and b, reading `inputs`, closes a cycle when a kernel that
  // reads a's or b's outputs reaches one that writes those inputs. (The merged kernel may
  // read buffers neither a nor b read: what they recomputed may now be materialised.) A
  // path only goes forward in a topological order, which bounds the search.
  static bool CreatesCycle(const Index& ix, size_t a, size_t b, const std::vector<int>& inputs) {
    std::set<int> writers;
    int last = -1;
    for (int i : inputs) {
      auto w = ix.writer.find(i);
      if (w == ix.writer.end() || w->second == static_cast<int>(a) ||
          w->second == static_cast<int>(b)) {
        continue;
      }
      writers.insert(w->second);
      last = std::max(last, ix.position[w->second]);
    }
    if (writers.empty()) return false;
    std::vector<int> stack;
    for (size_t k : {a, b}) {
      for (int n : ix.succ[k]) {
        if (n != static_cast<int>(a) && n != static_cast<int>(b)) stack.push_back(n);
      }
    }
    std::set<int> seen;
    while (!stack.empty()) {
      int k = stack.back();
      stack.pop_back();
      if (writers.count(k)) return true;
      if (ix.position[k] > last || !seen.insert(k).second) continue;
      for (int n : ix.succ[k]) stack.push_back(n);
    }
    return false;
  }

  std::optional<Kernel> Merge(const State& s, const Index& ix, size_t a, size_t b) {
    auto other = [&](int kernel) {
      return kernel != static_cast<int>(a) && kernel != static_cast<int>(b);
    };
    std::set<int> all(s.kernels[a].spec.outputs.begin(), s.kernels[a].spec.outputs.end());
    all.insert(s.kernels[b].spec.outputs.begin(), s.kernels[b].spec.outputs.end());
    KernelSpec spec;
    for (int o : all) {
      bool read_elsewhere = false;
      if (auto r = ix.readers.find(o); r != ix.readers.end()) {
        for (int k : r->second) read_elsewhere |= other(k);
      }
      if (graph_outputs_.count(o) || read_elsewhere) spec.outputs.push_back(o);
    }
    if (spec.outputs.empty()) return std::nullopt;
    SortByRank(spec.outputs);
    CollectBody(spec, [&](int node) {
      auto w = ix.writer.find(node);
      return w != ix.writer.end() && other(w->second);
    });
    if (CreatesCycle(ix, a, b, spec.inputs)) return std::nullopt;
    auto key = std::make_pair(spec.outputs, spec.inputs);
    auto memo = memo_.find(key);
    if (memo != memo_.end()) return memo->second;
    std::optional<Kernel> result = Build(std::move(spec));
    memo_[key] = result;
    return result;
  }

  // Fills nodes and inputs: everything the outputs need that no other kernel materialises.
  template <typename Materialised>
  void CollectBody(KernelSpec& spec, const Materialised& materialised) const {
    std::set<int> body, inputs;
    std::vector<int> stack(spec.outputs.begin(), spec.outputs.end());
    std::set<int> roots(spec.outputs.begin(), spec.outputs.end());
    while (!stack.empty()) {
      int id = stack.back();
      stack.pop_back();
      const Node& n = g_.nodes[id];
      if (n.op == OpCode::kParameter || (materialised(id) && !roots.count(id))) {
        inputs.insert(id);
        continue;
      }
      if (!body.insert(id).second) continue;
      for (int o : n.operands) stack.push_back(o);
    }
    spec.nodes.assign(body.begin(), body.end());
    SortByRank(spec.nodes);
    spec.inputs.assign(inputs.begin(), inputs.end());
    SortByRank(spec.inputs);
  }

  std::optional<Kernel> Build(KernelSpec spec) const {
    std::vector<int> reduces;
    for (int id : spec.nodes) {
      if (g_.nodes[id].op == OpCode::kReduce) reduces.push_back(id);
    }
    if (reduces.empty()) {
      const int64_t count = g_.nodes[spec.outputs[0]].shape.elements();
      for (int o : spec.outputs) {
        if (g_.nodes[o].shape.elements() != count || g_.nodes[o].op == OpCode::kParameter) {
          return std::nullopt;
        }
      }
      spec.kind = KernelKind::kLoop;
    } else {
      spec.kind = KernelKind::kRowStitch;
      spec.hero = reduces.front();
      for (int r : reduces) {
        if (RowGeometryOf(g_, r)) {
          spec.hero = r;
          break;
        }
      }
      StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g_, spec);
      if (layout.ok() && !RowStitchAllowed(spec, *layout)) {
        layout = InvalidArgument("row stitching is not among the rules");
      }
      if (!layout.ok() && !MakeReduceKernel(spec)) return std::nullopt;
      // Column reduces of the rows combine their blocks' partials behind a grid barrier.
      if (layout.ok() && !layout->column_reduces.empty()) spec = GlobalOf({std::move(spec)});
      // Sibling reductions and their side outputs also make a plain reduce kernel, whose
      // loop keeps more loads in flight than a row-stitched one: the cheaper one is kept.
      KernelSpec as_reduce = spec;
      if (layout.ok() && layout->column_reduces.empty() && MakeReduceKernel(as_reduce)) {
        std::optional<Kernel> stitched = Finish(std::move(spec));
        std::optional<Kernel> plain = Finish(std::move(as_reduce));
        if (!plain || (stitched && stitched->seconds <= plain->seconds)) return stitched;
        return plain;
      }
    }
    return Finish(std::move(spec));
  }

  // Whether `spec` computes more reductions than the rules let one kernel hold.
  bool OverReduceBudget(const KernelSpec& spec) const {
    const int cap = spec.kind == KernelKind::kColumnReduce ? rules_.max_column_reduces_per_kernel
                                                           : rules_.max_reduces_per_kernel;
    if (cap <= 0 && rules_.max_reduces_per_kernel <= 0) return false;
    const auto reduces = std::count_if(spec.nodes.begin(), spec.nodes.end(),
                                       [&](int id) { return g_.nodes[id].op == OpCode::kReduce; });
    return (cap > 0 && reduces > cap) ||
           (rules_.max_reduces_per_kernel > 0 && reduces > rules_.max_reduces_per_kernel);
  }

  // Whether `spec` reduces and holds a transpose the rules keep out of reductions: one whose
  // operand's minor-most dimension becomes an output dimension other than the one before the
  // output's minor-most. Where it becomes that one (a row of the reduction is a column of the
  // operand, and the next row the next column), the rows a block reduces side by side share
  // the operand's sectors, as in BladeDISC's stitch of a transposed row reduction.
  bool TransposeInReduction(const KernelSpec& spec) const {
    if (rules_.transposes_in_reductions || spec.kind == KernelKind::kLoop) return false;
    // Only a kernel that reads along rows has its neighbouring rows share sectors; a column
    // phase's lanes take neighbouring columns, each a sector of its own through any such
    // transpose.
    const bool along_rows =
        spec.kind == KernelKind::kRowReduce || spec.kind == KernelKind::kRowStitch;
    return std::any_of(spec.nodes.begin(), spec.nodes.end(), [&](int id) {
      if (!MovesMinorDimension(g_, id)) return false;
      const Node& t = g_.nodes[id];
      const int64_t minor = t.shape.rank() - 1;
      const auto becomes = std::find(t.dimensions.begin(), t.dimensions.end(), minor);
      return !along_rows || becomes - t.dimensions.begin() != minor - 1;
    });
  }

  // Schedules a kernel and prices it.
  std::optional<Kernel> Finish(KernelSpec spec) const {
    if (OverReduceBudget(spec)) return std::nullopt;
    const bool transposed = TransposeInReduction(spec);
    if (transposed && !rules_.transposed_row_tiles) return std::nullopt;
    if (!ScheduleKernel(g_, spec, device_).ok()) return std::nullopt;
    if (rules_.transposed_row_tiles) TileTransposedRows(g_, spec, device_);
    // Such a transpose stays out of the reduction unless row tiles stage it.
    if (transposed && spec.mapping.transpose_tile < 0) return std::nullopt;
    Kernel k;
    // A reduce kernel is priced as what it will become: split over blocks, when cheaper.
    k.spec = WrapSplitReduce(std::move(spec));
    k.seconds = model_->EstimateKernel(g_, k.spec).seconds;
    return k;
  }

  // Whether the rules let `spec`, laid out as `layout`, be a row-stitched kernel.
  bool RowStitchAllowed(const KernelSpec& spec, const RowStitchLayout& layout) const {
    if (!rules_.row_stitch) return false;
    if (!rules_.global_stitch && !layout.column_reduces.empty()) return false;
    if (rules_.max_row_stitch_len > 0 && layout.geometry.row_len > rules_.max_row_stitch_len) {
      return false;
    }
    if (!rules_.row_stitch_last_dim_only) return true;
    for (int id : spec.nodes) {
      const Node& n = g_.nodes[id];
      if (n.op != OpCode::kReduce) continue;
      const int64_t last = static_cast<int64_t>(g_.nodes[n.operands[0]].shape.rank()) - 1;
      if (n.dimensions != std::vector<int64_t>{last}) return false;
    }
    return true;
  }

  // Makes `spec` a reduce kernel (kRowReduce or kColumnReduce) when its outputs are reduces
  // of one geometry, computed side by side from inputs read once, and values of the reduce's
  // output shape computed from them: two column reductions of the same tensor, say.
  bool MakeReduceKernel(KernelSpec& spec) const {
    const Node& hero = g_.nodes[spec.hero];
    const Shape& input = g_.nodes[hero.operands[0]].shape;
    std::set<int> reduce_outputs;
    std::vector<int> side_outputs;
    for (int o : spec.outputs) {
      const Node& n = g_.nodes[o];
      if (n.op == OpCode::kReduce) {
        if (g_.nodes[n.operands[0]].shape.dims != input.dims || n.dimensions != hero.dimensions) {
          return false;
        }
        reduce_outputs.insert(o);
      } else if (n.shape.elements() == input.elements() &&
                 n.shape.elements() != hero.shape.elements()) {
        side_outputs.push_back(o);
      } else if (n.shape.elements() != hero.shape.elements()) {
        return false;
      }
    }
    // Side outputs are stored where the reduction visits their elements by linear index.
    if (!side_outputs.empty() && !ReducesLeadingDims(g_, spec.hero) &&
        !ReducesTrailingDims(g_, spec.hero)) {
      return false;
    }
    for (int o : side_outputs) {
      if (ReadsReduce(o, spec)) return false;
    }
    // Outputs of the reduce's shape are computed per output element from the reduce results
    // of that element; a reduce result reached through a reshape, broadcast or transpose
    // would be read at another index, which the reduce emitters do not provide. Only
    // elementwise ops keep the index (a transpose of a square result keeps its shape, not
    // its index).
    std::set<int> body(spec.nodes.begin(), spec.nodes.end());
    for (int id : spec.nodes) {
      const Node& n = g_.nodes[id];
      if (n.op == OpCode::kReduce ||
          (n.shape.dims == hero.shape.dims && ClassOf(n.op) == OpClass::kElementwise)) {
        continue;
      }
      for (int o : n.operands) {
        if (body.count(o) && (g_.nodes[o].op == OpCode::kReduce || ReadsReduce(o, spec))) {
          return false;
        }
      }
    }
    // Every reduce in the body is an output; under the rules' reduce_epilogues a kernel's
    // only reduce may instead be read by nothing but outputs of its shape, an epilogue the
    // emitters compute from it. Nothing feeding a reduce reads another reduce (each element
    // of every reduce's input is computed in the same pass).
    const int reduces_in_body =
        static_cast<int>(std::count_if(spec.nodes.begin(), spec.nodes.end(),
                                       [&](int id) { return g_.nodes[id].op == OpCode::kReduce; }));
    const bool epilogue_only =
        rules_.reduce_epilogues && reduce_outputs.empty() && reduces_in_body == 1;
    if (!epilogue_only && reduces_in_body != static_cast<int>(reduce_outputs.size())) return false;
    if (epilogue_only) reduce_outputs.insert(spec.hero);
    for (int r : reduce_outputs) {
      if (ReadsReduce(g_.nodes[r].operands[0], spec)) return false;
    }
    // One reduce and nothing else is the reduce kernel the planner starts from; without
    // reduce_epilogues, outputs of its shape beside it are left to merges of other kinds.
    const size_t computed =
        rules_.reduce_epilogues ? spec.outputs.size() : reduce_outputs.size() + side_outputs.size();
    if (computed < 2 && !epilogue_only) return false;
    spec.hero = *reduce_outputs.begin();
    SortByRankFirst(spec);
    spec.kind = IsRowReduction(g_, spec.hero) ? KernelKind::kRowReduce : KernelKind::kColumnReduce;
    return true;
  }

  // Whether computing `id` inside `spec` needs the value of a reduce of the kernel.
  bool ReadsReduce(int id, const KernelSpec& spec) const {
    std::set<int> body(spec.nodes.begin(), spec.nodes.end());
    std::vector<int> stack = {id};
    std::set<int> seen;
    while (!stack.empty()) {
      int n = stack.back();
      stack.pop_back();
      if (!body.count(n) || !seen.insert(n).second) continue;
      if (g_.nodes[n].op == OpCode::kReduce) return true;
      for (int o : g_.nodes[n].operands) stack.push_back(o);
    }
    return false;
  }

  // Puts the hero first among the outputs' reduces by rank (the emitters take the hero
  // from spec.hero; the order of outputs is the parameter order).
  void SortByRankFirst(KernelSpec& spec) const {
    int first = spec.hero;
    for (int o : spec.outputs) {
      if (g_.nodes[o].op == OpCode::kReduce && rank_[o] < rank_[first]) first = o;
    }
    spec.hero = first;
  }

  // The global scheme. Walks the ordered plan and joins each kernel into a global_stitch
  // kernel with the one before it while the model prices the joined kernel no higher than
  // the two apart (at equal cost one launch beats two: the host issues fewer launches).
  // A reduce kernel whose rows or tiles are too few to fill the GPU first splits its
  // reduction over blocks (WrapSplitReduce). Consecutive kernels of
  // an ordered plan can always be joined: the phases keep the order and a grid barrier
  // separates them.
  std::vector<KernelSpec> FormGlobalKernels(std::vector<KernelSpec> kernels, SearchBudget& budget) {
    std::vector<KernelSpec> out;
    for (KernelSpec& k : kernels) {
      if (!budget.Spend()) {
        out.push_back(std::move(k));
        continue;
      }
      KernelSpec current = WrapSplitReduce(std::move(k));
      if (!out.empty()) {
        std::optional<KernelSpec> joined = Join(out.back(), current);
        // Equal up to rounding: the sum of phase terms is added in another order.
        constexpr double kRelativeTie = 1e-4;
        const double apart = Seconds(out.back()) + Seconds(current);
        if (joined && Seconds(*joined) <= apart * (1 + kRelativeTie)) {
          out.back() = std::move(*joined);
          continue;
        }
      }
      out.push_back(std::move(current));
    }
    return out;
  }

  double Seconds(const KernelSpec& k) const { return model_->EstimateKernel(g_, k).seconds; }

  // A reduce kernel whose rows or tiles are too few to fill the GPU, split over blocks where
  // the model prices that lower: a column reduction of its own whose tiles' last blocks
  // combine the partials, or a global kernel of one phase behind a grid barrier.
  KernelSpec WrapSplitReduce(KernelSpec k) const {
    if (!rules_.global_stitch) return k;
    if (k.kind != KernelKind::kColumnReduce && k.kind != KernelKind::kRowReduce) return k;
    KernelSpec best = k;
    KernelSpec global = GlobalOf({k});
    if (ScheduleKernel(g_, global, device_).ok()) {
      bool split = false;
      for (const KernelSpec& p : global.phases) split |= p.mapping.reduce_chunks > 1;
      if (split && Seconds(global) < Seconds(best)) best = std::move(global);
    }
    KernelSpec last_block = k;
    if (SplitColumnReduceOverBlocks(g_, last_block, device_) &&
        Seconds(last_block) < Seconds(best)) {
      best = std::move(last_block);
    }
    return best;
  }

  std::optional<KernelSpec> Join(const KernelSpec& a, const KernelSpec& b) const {
    return JoinKernels(g_, rank_, a, b, device_);
  }

  KernelSpec GlobalOf(std::vector<KernelSpec> phases) const {
    return GlobalKernelOf(rank_, std::move(phases));
  }

  void RecordEdges(KernelSpec& spec) const {
    if (spec.kind == KernelKind::kGlobalStitch) {
      RecordGlobalEdges(spec);
      return;
    }
    if (spec.kind != KernelKind::kRowStitch) return;
    StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g_, spec);
    if (!layout.ok()) return;
    std::set<int> in_kernel(spec.nodes.begin(), spec.nodes.end());
    std::set<int> cached(layout->cached.begin(), layout->cached.end());
    std::set<int> columns(layout->column_reduces.begin(), layout->column_reduces.end());
    const StitchScheme shared =
        spec.mapping.threads_per_row > 32 ? StitchScheme::kRegional : StitchScheme::kLocal;
    for (int id : spec.nodes) {
      for (int o : g_.nodes[id].operands) {
        if (!in_kernel.count(o) && !cached.count(o)) continue;
        if (columns.count(o)) {
          // Blocks' partials meet in the workspace behind a grid barrier.
          spec.edges.push_back({o, id, StitchScheme::kGlobal});
        } else if (g_.nodes[o].op == OpCode::kReduce) {
          spec.edges.push_back({o, id, shared});
        } else if (cached.count(o)) {
          spec.edges.push_back({o, id, StitchScheme::kLocal});
        }
      }
    }
  }

  // Values a phase writes and a later phase reads cross a grid barrier in global memory.
  void RecordGlobalEdges(KernelSpec& spec) const {
    std::set<int> written;
    // A value several phases recompute from the same producer is one edge.
    std::set<std::pair<int, int>> recorded;
    for (size_t p = 0; p < spec.phases.size(); ++p) {
      KernelSpec& phase = spec.phases[p];
      phase.name = PhaseName(spec, p);
      RecordEdges(phase);
      std::set<int> in_phase(phase.nodes.begin(), phase.nodes.end());
      for (int id : phase.nodes) {
        for (int o : g_.nodes[id].operands) {
          if (written.count(o) && !in_phase.count(o) && recorded.insert({o, id}).second) {
            spec.edges.push_back({o, id, StitchScheme::kGlobal});
          }
        }
      }
      written.insert(phase.outputs.begin(), phase.outputs.end());
    }
  }

  void SortByRank(std::vector<int>& v) const {
    std::sort(v.begin(), v.end(), [&](int x, int y) { return rank_[x] < rank_[y]; });
  }

  const Graph& g_;
  const GpuDevice& device_;
  const FusionRules rules_;
  std::unique_ptr<CostModel> model_;
  std::vector<int> rank_;
  std::set<int> graph_outputs_;
  std::map<std::pair<std::vector<int>, std::vector<int>>, std::optional<Kernel>> memo_;
};

}  // namespace

StatusOr<FusionPlan> PlanStitched(const Graph& g, const GpuDevice& device,
                                  const StitchPlannerOptions& options) {
  STITCH_ASSIGN_OR_RETURN(FusionPlan baseline, PlanBaseline(g));
  Planner planner(g, device, options.rules);
  STITCH_ASSIGN_OR_RETURN(State initial, planner.Initial(baseline));
  const int64_t total = options.budget_evaluations +
                        options.budget_evaluations_per_node * static_cast<int64_t>(g.nodes.size());
  SearchBudget budget(total);
  constexpr double kMinGain = 1e-12;
  State best = initial;
  if (initial.kernels.size() > kGreedyAbove || options.beam_width <= 1) {
    // Greedy: each step applies every disjoint improving merge.
    State current = std::move(initial);
    while (!budget.exhausted()) {
      State next = planner.ApplyDisjoint(current, planner.Candidates(current, budget));
      if (next.seconds >= current.seconds - kMinGain) break;
      current = std::move(next);
    }
    best = std::move(current);
  } else {
    // Beam search: each step expands every plan of the beam by one merge and keeps the
    // cheapest distinct plans that improve on their parent or on the best so far.
    std::vector<State> beam = {std::move(initial)};
    while (!budget.exhausted()) {
      std::vector<State> improving;
      for (const State& s : beam) {
        for (auto& c : planner.Candidates(s, budget)) {
          State next = Planner::Apply(s, std::move(c));
          if (next.seconds < s.seconds - kMinGain || next.seconds < best.seconds - kMinGain) {
            improving.push_back(std::move(next));
          }
        }
      }
      if (improving.empty()) break;
      std::sort(improving.begin(), improving.end(),
                [](const State& x, const State& y) { return x.seconds < y.seconds; });
      beam.clear();
      std::set<std::string> seen;
      for (State& c : improving) {
        if (beam.size() >= static_cast<size_t>(options.beam_width)) break;
        if (seen.insert(Planner::Signature(c)).second) beam.push_back(std::move(c));
      }
      if (beam.front().seconds < best.seconds) best = beam.front();
    }
  }
  // The global scheme gets what is left of the budget, and at least a share of its own.
  SearchBudget global(std::max(budget.left(), total / 4));
  STITCH_ASSIGN_OR_RETURN(FusionPlan plan, planner.Finish(std::move(best), global));
  // The search priced persistent kernels on co-resident grids; the plan it chose keeps the
  // smallest grid that costs no more.
  for (KernelSpec& k : plan.kernels) {
    SizeGridToWork(g, k, device);
    if (options.rules.loop_block_starts) RemapLoopForBlockStarts(g, k, device);
    if (options.rules.loop_rows_in_shared_memory) KeepLoopRowsInSharedMemory(g, k, device);
    if (options.rules.loop_rows_in_l2) FitLoopRowsInL2(g, k, device);
    if (options.rules.loop_columns_per_thread) KeepLoopColumnsPerThread(g, k, device);
  }
  return plan;
}

namespace {

// `global` as the planner finishes the global kernels it forms: its grid sized to its work,
// named `name`, its phases after it.
KernelSpec FinishedGlobalKernel(const Graph& g, KernelSpec global, const std::string& name,
                                const GpuDevice& device) {
  global.name = name;
  SizeGridToWork(g, global, device);
  for (size_t p = 0; p < global.phases.size(); ++p) global.phases[p].name = PhaseName(global, p);
  return global;
}

// The mappings a loop kernel of its own could have: the one the planner gives it (the
// scheduler's choice, re-chosen with block starts, then per-column values kept per thread),
// then each of LoopMappingCandidates' that differs from every earlier one.
std::vector<KernelSpec> LoopKernelsApart(const Graph& g, const KernelSpec& loop,
                                         const GpuDevice& device) {
  std::vector<KernelSpec> loops;
  KernelSpec chosen = loop;
  if (ScheduleKernel(g, chosen, device).ok()) {
    RemapLoopForBlockStarts(g, chosen, device);
    KeepLoopColumnsPerThread(g, chosen, device);
    loops.push_back(std::move(chosen));
  }
  for (KernelSpec& c : LoopMappingCandidates(g, loop, device)) loops.push_back(std::move(c));
  const auto key = [](const KernelSpec& k) {
    const ThreadMapping& m = k.mapping;
    return std::make_tuple(m.launch.block, m.launch.grid, m.vector_width, m.column_period,
                           m.transpose_tile);
  };
  std::vector<KernelSpec> distinct;
  for (KernelSpec& k : loops) {
    const bool seen = std::any_of(distinct.begin(), distinct.end(),
                                  [&](const KernelSpec& d) { return key(d) == key(k); });
    if (!seen) distinct.push_back(std::move(k));
  }
  return distinct;
}

}  // namespace

std::vector<KernelRegrouping> PhaseRegroupings(const Graph& g, const FusionPlan& plan,
                                               const GpuDevice& device) {
  const std::vector<int> rank = TopologicalRanks(g);
  std::vector<KernelRegrouping> out;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const KernelSpec& k = plan.kernels[i];
    if (k.kind != KernelKind::kGlobalStitch) continue;
    const int first = static_cast<int>(i);
    if (k.phases.size() >= 2 && k.phases.back().kind == KernelKind::kLoop) {
      std::vector<KernelSpec> head_phases(k.phases.begin(), k.phases.end() - 1);
      std::optional<KernelSpec> head =
          ScheduledGlobalKernelOf(g, rank, std::move(head_phases), device);
      KernelSpec loop = k.phases.back();
      loop.name = k.name + "_loop";
      if (head) {
        const KernelSpec finished = FinishedGlobalKernel(g, std::move(*head), k.name, device);
        for (KernelSpec& apart : LoopKernelsApart(g, loop, device)) {
          out.push_back({first, 1, {finished, std::move(apart)}});
        }
      }
    }
    if (i + 1 < plan.kernels.size() && plan.kernels[i + 1].kind == KernelKind::kLoop) {
      if (std::optional<KernelSpec> joined = JoinKernels(g, rank, k, plan.kernels[i + 1], device)) {
        out.push_back({first, 2, {FinishedGlobalKernel(g, std::move(*joined), k.name, device)}});
      }
    }
  }
  return out;
}

}  // namespace stitch
