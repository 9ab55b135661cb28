#include "stitch/plan/layout_transposes.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace stitch {
namespace {

using Dims = std::vector<int64_t>;

enum class Role {
  kRoot,           // transpose(x, p): the group reads x as stored
  kInner,          // an elementwise op computed in x's order
  kSide,           // a broadcast or splat constant an inner op reads, re-laid for the group
  kForeign,        // a full-size value in logical order an inner op reads: transposed into
                   // stored order for the group, where the fold saves more than it moves
  kReduceExit,     // a reduction of a group value: its dimensions map through p
  kTransposeExit,  // a transpose of a group value: composed with p, or cancelled
  kReshapeExit,    // a reshape of a group value that is a reshape of its storage: a transpose
                   // of that reshape, which the next round folds
};

// One closed group: the values that move to the stored order of its roots' operands.
struct Group {
  Dims perm;  // p: logical dimension i is stored dimension perm[i]
  std::map<int, Role> roles;
};

bool IsIdentity(const Dims& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

bool StrictlyIncreasing(const Dims& v) {
  return std::adjacent_find(v.begin(), v.end(), std::greater_equal<int64_t>()) == v.end();
}

// Whether a reduction over `reduced` (logical dimensions) keeps the remaining dimensions in the
// same order once they are mapped to stored ones: its result is then the same tensor.
bool KeepsOrder(const Dims& perm, const Dims& reduced) {
  Dims kept;
  for (size_t i = 0; i < perm.size(); ++i) {
    if (std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(i)) == reduced.end()) {
      kept.push_back(perm[i]);
    }
  }
  return StrictlyIncreasing(kept);
}

// A run of a reshape's operand dimensions that becomes a run of its result dimensions
// (merged, split or kept), with the reshape's dimensions of one element riding along.
struct ReshapeRun {
  Dims operand;  // logical operand dimensions of more than one element
  int64_t result_begin = 0, result_end = 0;
  int64_t stored_rank = 0;  // where the run starts among the stored dimensions
};

// The runs of reshape(transpose(x, perm), result), or nullopt when one run is not a run of
// consecutive stored dimensions of x in order: only then is the reshape one of x's storage.
std::optional<std::vector<ReshapeRun>> StoredRuns(const Dims& stored, const Dims& perm,
                                                  const Dims& result) {
  Dims rank_of(stored.size(), -1);  // rank among the stored dimensions of more than one element
  for (size_t d = 0, r = 0; d < stored.size(); ++d) {
    if (stored[d] != 1) rank_of[d] = static_cast<int64_t>(r++);
  }
  std::vector<ReshapeRun> runs;
  size_t i = 0, j = 0;
  auto next_operand = [&] {
    while (i < perm.size() && stored[perm[i]] == 1) ++i;
    return i < perm.size();
  };
  auto next_result = [&] {
    while (j < result.size() && result[j] == 1) ++j;
    return j < result.size();
  };
  while (next_operand() && next_result()) {
    ReshapeRun run;
    run.result_begin = runs.empty() ? 0 : static_cast<int64_t>(j);
    int64_t in = stored[perm[i]], out = result[j];
    run.operand.push_back(static_cast<int64_t>(i++));
    ++j;
    while (in != out) {
      if (in < out ? !next_operand() : !next_result()) return std::nullopt;
      if (in < out) {
        in *= stored[perm[i]];
        run.operand.push_back(static_cast<int64_t>(i++));
      } else {
        out *= result[j++];
      }
    }
    run.stored_rank = rank_of[perm[run.operand[0]]];
    for (size_t k = 1; k < run.operand.size(); ++k) {
      if (rank_of[perm[run.operand[k]]] != run.stored_rank + static_cast<int64_t>(k)) {
        return std::nullopt;
      }
    }
    runs.push_back(std::move(run));
  }
  if (runs.empty()) runs.emplace_back();  // one element: every reshape is one of storage
  for (size_t k = 0; k + 1 < runs.size(); ++k) runs[k].result_end = runs[k + 1].result_begin;
  runs.back().result_end = static_cast<int64_t>(result.size());
  return runs;
}

// reshape(transpose(x, p), result) is transpose(reshape(x, shape), perm) where every run of
// dimensions the reshape merges or splits lies in x's storage in order and side by side:
// GroupNorm's view of channels-last storage into groups, [N,C,H,W] to [N,G,C/G,H*W], is the
// transpose of x's view [N,H*W,G,C/G].
struct StoredReshape {
  Dims shape;  // of the reshape of x
  Dims perm;   // of the transpose that gives `result`; the identity when none is needed
};

std::optional<StoredReshape> ReshapeOfStorage(const Dims& stored, const Dims& perm,
                                              const Dims& result) {
  std::optional<std::vector<ReshapeRun>> runs = StoredRuns(stored, perm, result);
  if (!runs) return std::nullopt;
  std::stable_sort(runs->begin(), runs->end(), [](const ReshapeRun& a, const ReshapeRun& b) {
    return a.stored_rank < b.stored_rank;
  });
  StoredReshape r;
  r.perm.resize(result.size());
  for (const ReshapeRun& run : *runs) {
    for (int64_t d = run.result_begin; d < run.result_end; ++d) {
      r.perm[d] = static_cast<int64_t>(r.shape.size());
      r.shape.push_back(result[d]);
    }
  }
  return r;
}

// The shape in stored order of a value of `logical` shape behind the transpose by `perm`.
Dims StoredDims(const Dims& perm, const Dims& logical) {
  Dims stored(logical.size());
  for (size_t i = 0; i < logical.size(); ++i) stored[perm[i]] = logical[i];
  return stored;
}

// Grows the group of the layout transpose `root`, or returns nullopt when it is not closed.
class GroupFinder {
 public:
  GroupFinder(const Graph& g, const std::vector<std::vector<int>>& users,
              const std::vector<bool>& is_output, const std::vector<bool>& claimed)
      : g_(g), users_(users), is_output_(is_output), claimed_(claimed) {}

  // The roots the last Grow reached, whether or not its group closed: a growth from any of
  // them finds the same group.
  const std::vector<int>& roots() const { return roots_; }

  std::optional<Group> Grow(int root) {
    group_ = Group{g_.nodes[root].dimensions, {}};
    logical_ = g_.nodes[root].shape.dims;
    queue_.clear();
    roots_.clear();
    joinable_.clear();
    foreign_ = 0;
    if (!AddRoot(root)) return std::nullopt;
    while (!queue_.empty()) {
      const int m = queue_.back();
      queue_.pop_back();
      if (is_output_[m]) return std::nullopt;  // read in logical order by the caller
      for (int u : users_[m]) {
        if (!AdmitUser(m, u)) return std::nullopt;
      }
    }
    if (foreign_ > 0 && foreign_ >= TransposesRemoved()) return std::nullopt;
    return std::move(group_);
  }

 private:
  bool Has(int id, Role r) const {
    auto it = group_.roles.find(id);
    return it != group_.roles.end() && it->second == r;
  }

  // The transposes of the group's size the fold removes: its roots, and the transpose exits
  // that undo p.
  int TransposesRemoved() const {
    int removed = static_cast<int>(roots_.size());
    for (const auto& [id, role] : group_.roles) {
      if (role != Role::kTransposeExit || g_.nodes[id].shape.dims.size() != group_.perm.size()) {
        continue;
      }
      const Dims& t = g_.nodes[id].dimensions;
      bool undoes = true;
      for (size_t i = 0; i < t.size(); ++i) undoes &= group_.perm[t[i]] == static_cast<int64_t>(i);
      removed += undoes ? 1 : 0;
    }
    return removed;
  }

  bool AddRoot(int id) {
    if (claimed_[id]) return false;
    group_.roles[id] = Role::kRoot;
    roots_.push_back(id);
    queue_.push_back(id);
    return true;
  }

  bool AdmitUser(int m, int u) {
    const Node& n = g_.nodes[u];
    auto it = group_.roles.find(u);
    if (it != group_.roles.end()) {
      // Already seen from another operand: fine as an op of the group, not as a root or a
      // side value, which would read m in logical order.
      return it->second == Role::kInner || it->second == Role::kReduceExit ||
             it->second == Role::kTransposeExit || it->second == Role::kReshapeExit;
    }
    if (claimed_[u]) return false;
    switch (n.op) {
      case OpCode::kTranspose:
        group_.roles[u] = Role::kTransposeExit;
        return true;
      case OpCode::kReduce:
        if (n.operands[0] != m || !KeepsOrder(group_.perm, n.dimensions)) return false;
        group_.roles[u] = Role::kReduceExit;
        return true;
      case OpCode::kReshape:
        if (!ReshapeOfStorage(StoredDims(group_.perm, logical_), group_.perm, n.shape.dims)) {
          return false;
        }
        group_.roles[u] = Role::kReshapeExit;
        return true;
      default:
        return ClassOf(n.op) == OpClass::kElementwise && AdmitInner(u);
    }
  }

  // Admits the elementwise op `u` with whichever of its operands are not in the group yet.
  // An op that joins two paths of the group (x / (1 + exp(-x))) is reached from one of them
  // first; the op on the other path joins from above.
  bool AdmitInner(int u) {
    if (!CanJoin(u)) return false;
    Join(u);
    return true;
  }

  enum class Operand { kNone, kRoot, kSide };

  // An operand that can enter the group as it is: another transpose by the same p, or a
  // value that is the same in any order of its dimensions' storage once re-laid.
  Operand OperandKind(int o) const {
    const Node& n = g_.nodes[o];
    if (n.shape.dims != logical_ || claimed_[o]) return Operand::kNone;
    if (n.op == OpCode::kTranspose && n.dimensions == group_.perm) return Operand::kRoot;
    const bool splat = n.op == OpCode::kConstant && n.literal.size() == 1;
    // A broadcast that adds no dimension reads a full-size value in logical order.
    const bool broadcast =
        n.op == OpCode::kBroadcast && g_.nodes[n.operands[0]].shape.elements() < n.shape.elements();
    return broadcast || splat ? Operand::kSide : Operand::kNone;
  }

  // A full-size value in logical order that neither enters the group as it is nor joins it:
  // the group reads it transposed into stored order (not a transpose itself, which would be
  // composed with another).
  bool IsForeign(int o) const {
    const Node& n = g_.nodes[o];
    return n.shape.dims == logical_ && !claimed_[o] && n.op != OpCode::kTranspose;
  }

  // Whether `u` can be computed in stored order: a full-size elementwise op whose operands
  // are in the group as roots, inner ops, side or foreign values, or can enter it. A chain of ops
  // entering from above is at most kMaxJoinDepth long (the search recurses, and a longer
  // chain leaves the group open), so that Join's recursion is as shallow.
  static constexpr int kMaxJoinDepth = 64;
  bool CanJoin(int u, int depth = 0) {
    if (auto it = joinable_.find(u); it != joinable_.end()) return it->second;
    if (depth > kMaxJoinDepth) return false;
    const Node& n = g_.nodes[u];
    bool ok = !claimed_[u] && ClassOf(n.op) == OpClass::kElementwise && n.shape.dims == logical_;
    for (size_t k = 0; ok && k < n.operands.size(); ++k) {
      const int o = n.operands[k];
      ok = Has(o, Role::kRoot) || Has(o, Role::kInner) || Has(o, Role::kSide) ||
           Has(o, Role::kForeign) ||
           (!group_.roles.count(o) &&
            (OperandKind(o) != Operand::kNone || CanJoin(o, depth + 1) || IsForeign(o)));
    }
    return joinable_[u] = ok;
  }

  // Adds `u`, which CanJoin accepted, and the operands it needs.
  void Join(int u) {
    group_.roles[u] = Role::kInner;
    for (int o : g_.nodes[u].operands) {
      if (group_.roles.count(o)) continue;
      switch (OperandKind(o)) {
        case Operand::kRoot:
          AddRoot(o);
          break;
        case Operand::kSide:
          group_.roles[o] = Role::kSide;
          break;
        case Operand::kNone:
          if (joinable_[o]) {
            Join(o);
          } else {
            group_.roles[o] = Role::kForeign;
            ++foreign_;
          }
          break;
      }
    }
    queue_.push_back(u);
  }

  const Graph& g_;
  const std::vector<std::vector<int>>& users_;
  const std::vector<bool>& is_output_;
  const std::vector<bool>& claimed_;
  Group group_;
  Dims logical_;
  std::vector<int> queue_;
  std::vector<int> roots_;
  std::map<int, bool> joinable_;  // CanJoin's answers in this growth
  int foreign_ = 0;               // values with Role::kForeign
};

// Copies the graph in topological order, computing each group's values in stored order.
class Rewriter {
 public:
  Rewriter(const Graph& g, std::vector<Group> groups) : g_(g), groups_(std::move(groups)) {
    group_of_.assign(g.nodes.size(), -1);
    for (size_t k = 0; k < groups_.size(); ++k) {
      for (const auto& [id, role] : groups_[k].roles) {
        if (role != Role::kSide && role != Role::kForeign) group_of_[id] = static_cast<int>(k);
      }
    }
    out_.name = g.name;
    out_.outer_parameters = g.outer_parameters;
    map_.assign(g.nodes.size(), -1);
  }

  Graph Run() {
    for (int id : TopologicalOrder(g_)) map_[id] = Emit(id);
    for (int o : g_.outputs) out_.outputs.push_back(map_[o]);
    return WithoutDeadNodes(std::move(out_));
  }

 private:
  int Emit(int id) {
    const Node& n = g_.nodes[id];
    const int k = group_of_[id];
    if (k < 0) return Copy(n);
    const Group& group = groups_[k];
    switch (group.roles.at(id)) {
      case Role::kRoot:
        return map_[n.operands[0]];
      case Role::kInner:
        return EmitInner(k, n);
      case Role::kReduceExit: {
        Node r = Remapped(n);
        for (int64_t& d : r.dimensions) d = group.perm[d];
        std::sort(r.dimensions.begin(), r.dimensions.end());
        return out_.Add(std::move(r));
      }
      case Role::kTransposeExit: {
        Node t = Remapped(n);
        for (int64_t& d : t.dimensions) d = group.perm[d];
        return IsIdentity(t.dimensions) ? t.operands[0] : out_.Add(std::move(t));
      }
      case Role::kReshapeExit:
        return EmitReshapeExit(group, n);
      case Role::kSide:
      case Role::kForeign:
        break;
    }
    return Copy(n);
  }

  Node Remapped(const Node& n) const {
    Node c = n;
    for (int& o : c.operands) o = map_[o];
    return c;
  }

  int Copy(const Node& n) { return out_.Add(Remapped(n)); }

  int EmitReshapeExit(const Group& group, const Node& n) {
    Node reshape = Remapped(n);
    const Dims& stored = out_.nodes[reshape.operands[0]].shape.dims;
    const StoredReshape r = *ReshapeOfStorage(stored, group.perm, n.shape.dims);
    reshape.name = n.name + ".of_storage";
    reshape.shape.dims = r.shape;
    const int id = out_.Add(std::move(reshape));
    if (IsIdentity(r.perm)) return id;
    Node t = n;
    t.op = OpCode::kTranspose;
    t.operands = {id};
    t.dimensions = r.perm;
    return out_.Add(std::move(t));
  }

  int EmitInner(int k, const Node& n) {
    Node c = n;
    c.shape.dims = StoredDims(groups_[k].perm, n.shape.dims);
    for (int& o : c.operands) {
      const auto it = groups_[k].roles.find(o);
      const Role role = it == groups_[k].roles.end() ? Role::kInner : it->second;
      o = role == Role::kSide ? Side(k, o) : role == Role::kForeign ? Foreign(k, o) : map_[o];
    }
    return out_.Add(std::move(c));
  }

  // The group's copy of a broadcast or splat constant, in stored order.
  int Side(int k, int id) {
    const auto key = std::make_pair(k, id);
    if (auto it = relaid_.find(key); it != relaid_.end()) return it->second;
    const Group& group = groups_[k];
    const Node& n = g_.nodes[id];
    Node c = n;
    c.shape.dims = StoredDims(group.perm, n.shape.dims);
    if (n.op == OpCode::kBroadcast) {
      Dims mapped;
      for (int64_t d : n.dimensions) mapped.push_back(group.perm[d]);
      c.operands = {SortedOperand(map_[n.operands[0]], mapped)};
      std::sort(mapped.begin(), mapped.end());
      c.dimensions = mapped;
    }
    return relaid_[key] = out_.Add(std::move(c));
  }

  // The group's copy of a full-size value in logical order: its transpose into stored order.
  int Foreign(int k, int id) {
    const auto key = std::make_pair(k, id);
    if (auto it = relaid_.find(key); it != relaid_.end()) return it->second;
    const Dims& perm = groups_[k].perm;
    Node t;
    t.op = OpCode::kTranspose;
    t.name = g_.nodes[id].name + ".stored_order";
    t.operands = {map_[id]};
    t.dimensions.resize(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) t.dimensions[perm[i]] = static_cast<int64_t>(i);
    t.shape.dtype = g_.nodes[id].shape.dtype;
    t.shape.dims = StoredDims(perm, g_.nodes[id].shape.dims);
    return relaid_[key] = out_.Add(std::move(t));
  }

  // `operand` with its dimensions in the order of the stored dimensions they broadcast to
  // (`mapped`): itself where they are in order, else a transpose of it (a smaller tensor).
  int SortedOperand(int operand, const Dims& mapped) {
    if (StrictlyIncreasing(mapped)) return operand;
    Dims order(mapped.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return mapped[a] < mapped[b]; });
    Node t;
    t.op = OpCode::kTranspose;
    t.name = out_.nodes[operand].name + ".stored_order";
    t.operands = {operand};
    t.dimensions = order;
    t.shape.dtype = out_.nodes[operand].shape.dtype;
    for (int64_t d : order) t.shape.dims.push_back(out_.nodes[operand].shape.dims[d]);
    return out_.Add(std::move(t));
  }

  const Graph& g_;
  std::vector<Group> groups_;
  std::vector<int> group_of_;
  std::vector<int> map_;
  // Per (group, node): the group's copy of a side or foreign value, in stored order.
  std::map<std::pair<int, int>, int> relaid_;
  Graph out_;
};

// Elements moved by the graph's transposes: what a fold saves.
int64_t TransposedElements(const Graph& g) {
  int64_t elements = 0;
  const std::vector<bool> live = LiveNodes(g);
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    if (live[id] && n.op == OpCode::kTranspose && !IsIdentity(n.dimensions)) {
      elements += n.shape.elements();
    }
  }
  return elements;
}

LayoutTransposeFold FoldGroups(const Graph& g) {
  std::vector<std::vector<int>> users = g.Users();
  for (std::vector<int>& u : users) {
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  std::vector<bool> is_output(g.nodes.size(), false);
  for (int o : g.outputs) is_output[o] = true;
  std::vector<bool> claimed(g.nodes.size(), false);
  std::vector<bool> tried(g.nodes.size(), false);  // reached by a growth that did not close
  const std::vector<bool> live = LiveNodes(g);
  std::vector<Group> groups;
  int folded = 0;
  GroupFinder finder(g, users, is_output, claimed);
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    if (n.op != OpCode::kTranspose || claimed[id] || tried[id] || !live[id] ||
        IsIdentity(n.dimensions)) {
      continue;
    }
    std::optional<Group> group = finder.Grow(static_cast<int>(id));
    if (!group) {
      // Each transpose is grown from at most once: a graph of many transposes into one open
      // group costs one growth, not one per transpose.
      for (int r : finder.roots()) tried[r] = true;
      continue;
    }
    for (const auto& [member, role] : group->roles) {
      if (role == Role::kRoot) ++folded;
      if (role != Role::kSide && role != Role::kForeign) claimed[member] = true;
    }
    groups.push_back(std::move(*group));
  }
  if (groups.empty()) return {g, 0};
  return {Rewriter(g, std::move(groups)).Run(), folded};
}

}  // namespace

LayoutTransposeFold FoldLayoutTransposes(const Graph& g) {
  // A round's reshape exits leave transposes of reshaped storage for the next round to fold.
  // Of the rounds' graphs, the one whose transposes move the fewest elements is kept (the
  // first among equals, the input first of all).
  constexpr int kMaxRounds = 4;
  LayoutTransposeFold best{g, 0};
  int64_t least = TransposedElements(g);
  LayoutTransposeFold current = best;
  for (int round = 0; round < kMaxRounds; ++round) {
    LayoutTransposeFold next = FoldGroups(current.graph);
    if (next.folded == 0) break;
    current = {std::move(next.graph), current.folded + next.folded};
    if (const int64_t moved = TransposedElements(current.graph); moved < least) {
      least = moved;
      best = current;
    }
  }
  return best;
}

}  // namespace stitch
