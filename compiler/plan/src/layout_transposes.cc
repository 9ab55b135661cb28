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
  kReduceExit,     // a reduction of a group value: its dimensions map through p
  kTransposeExit,  // a transpose of a group value: composed with p, or cancelled
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
    deferred_.clear();
    if (!AddRoot(root)) return std::nullopt;
    while (!queue_.empty()) {
      const int m = queue_.back();
      queue_.pop_back();
      if (is_output_[m]) return std::nullopt;  // read in logical order by the caller
      for (int u : users_[m]) {
        if (!AdmitUser(m, u)) return std::nullopt;
      }
    }
    // An op deferred for an operand that never joined reads a group value in logical order.
    for (int u : deferred_) {
      if (!Has(u, Role::kInner)) return std::nullopt;
    }
    return std::move(group_);
  }

 private:
  bool Has(int id, Role r) const {
    auto it = group_.roles.find(id);
    return it != group_.roles.end() && it->second == r;
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
             it->second == Role::kTransposeExit;
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
      default:
        return ClassOf(n.op) == OpClass::kElementwise && AdmitInner(u);
    }
  }

  bool AdmitInner(int u) {
    const Node& n = g_.nodes[u];
    if (n.shape.dims != logical_) return false;
    group_.roles[u] = Role::kInner;
    for (int o : n.operands) {
      if (Has(o, Role::kRoot) || Has(o, Role::kInner) || Has(o, Role::kSide)) continue;
      if (group_.roles.count(o)) return false;
      if (MayJoinLater(o)) {
        // An op that joins two paths of the group (x / (1 + exp(-x))) is reached from the
        // shorter one first: it is admitted when its other operand joins, or the group fails.
        group_.roles.erase(u);
        deferred_.push_back(u);
        return true;
      }
      if (!AdmitOperand(o)) return false;
    }
    queue_.push_back(u);
    return true;
  }

  // A full-size elementwise op not yet in the group, which a later step may admit.
  bool MayJoinLater(int o) const {
    const Node& n = g_.nodes[o];
    return !claimed_[o] && ClassOf(n.op) == OpClass::kElementwise && n.shape.dims == logical_;
  }

  // An operand of an inner op not yet in the group: another transpose by the same p, or a
  // value that is the same in any order of its dimensions' storage once re-laid.
  bool AdmitOperand(int o) {
    const Node& n = g_.nodes[o];
    if (n.shape.dims != logical_) return false;
    if (n.op == OpCode::kTranspose && n.dimensions == group_.perm) return AddRoot(o);
    const bool splat = n.op == OpCode::kConstant && n.literal.size() == 1;
    // A broadcast that adds no dimension reads a full-size value in logical order.
    const bool broadcast =
        n.op == OpCode::kBroadcast && g_.nodes[n.operands[0]].shape.elements() < n.shape.elements();
    if (!broadcast && !splat) return false;
    group_.roles[o] = Role::kSide;
    return true;
  }

  const Graph& g_;
  const std::vector<std::vector<int>>& users_;
  const std::vector<bool>& is_output_;
  const std::vector<bool>& claimed_;
  Group group_;
  Dims logical_;
  std::vector<int> queue_;
  std::vector<int> roots_;
  std::vector<int> deferred_;
};

// Copies the graph in topological order, computing each group's values in stored order.
class Rewriter {
 public:
  Rewriter(const Graph& g, std::vector<Group> groups) : g_(g), groups_(std::move(groups)) {
    group_of_.assign(g.nodes.size(), -1);
    for (size_t k = 0; k < groups_.size(); ++k) {
      for (const auto& [id, role] : groups_[k].roles) {
        if (role != Role::kSide) group_of_[id] = static_cast<int>(k);
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
      case Role::kSide:
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

  Dims Stored(const Group& group, const Dims& logical) const {
    Dims stored(logical.size());
    for (size_t i = 0; i < logical.size(); ++i) stored[group.perm[i]] = logical[i];
    return stored;
  }

  int EmitInner(int k, const Node& n) {
    Node c = n;
    c.shape.dims = Stored(groups_[k], n.shape.dims);
    for (int& o : c.operands) {
      const auto it = groups_[k].roles.find(o);
      o = it != groups_[k].roles.end() && it->second == Role::kSide ? Side(k, o) : map_[o];
    }
    return out_.Add(std::move(c));
  }

  // The group's copy of a broadcast or splat constant, in stored order.
  int Side(int k, int id) {
    const auto key = std::make_pair(k, id);
    if (auto it = sides_.find(key); it != sides_.end()) return it->second;
    const Group& group = groups_[k];
    const Node& n = g_.nodes[id];
    Node c = n;
    c.shape.dims = Stored(group, n.shape.dims);
    if (n.op == OpCode::kBroadcast) {
      Dims mapped;
      for (int64_t d : n.dimensions) mapped.push_back(group.perm[d]);
      c.operands = {SortedOperand(map_[n.operands[0]], mapped)};
      std::sort(mapped.begin(), mapped.end());
      c.dimensions = mapped;
    }
    return sides_[key] = out_.Add(std::move(c));
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
  std::map<std::pair<int, int>, int> sides_;
  Graph out_;
};

}  // namespace

LayoutTransposeFold FoldLayoutTransposes(const Graph& g) {
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
      if (role != Role::kSide) claimed[member] = true;
    }
    groups.push_back(std::move(*group));
  }
  if (groups.empty()) return {g, 0};
  return {Rewriter(g, std::move(groups)).Run(), folded};
}

}  // namespace stitch
