#include "stitch/ir/graph.h"

#include <algorithm>
#include <array>
#include <sstream>

namespace stitch {
namespace {

struct OpInfo {
  OpCode op;
  std::string_view name;
  OpClass cls;
  int arity;
  OperandDTypes operands;
  ResultDType result;
  OpCost cost;
};

// Returns the table entry of one op.
constexpr OpInfo MakeOpInfo(OpCode op, std::string_view name, OpClass cls, int arity,
                            OperandDTypes operands, ResultDType result, OpCost cost) {
  return {op, name, cls, arity, operands, result, cost};
}

// One entry per op of the op list.
#define STITCH_OP(Enum, wire, Proto, name, hlo, Class, arity, Operands, Result, Cost)     \
  MakeOpInfo(OpCode::k##Enum, name, OpClass::k##Class, arity, OperandDTypes::k##Operands, \
             ResultDType::k##Result, OpCost::k##Cost),
constexpr OpInfo kOps[] = {
#include "stitch/ir/op_list.h"
};

// Returns true when the ops are listed in strictly increasing wire order, which also makes
// every wire value unique.
constexpr bool InWireOrder() {
  for (size_t k = 1; k < std::size(kOps); ++k) {
    if (kOps[k - 1].op >= kOps[k].op) return false;
  }
  return true;
}
static_assert(InWireOrder(), "op_list.h must list the ops in increasing wire-value order");

const OpInfo* FindOp(OpCode op) {
  for (const auto& info : kOps) {
    if (info.op == op) return &info;
  }
  return nullptr;
}

constexpr std::array<std::string_view, 6> kDirections = {"EQ", "NE", "LT", "LE", "GT", "GE"};
constexpr std::array<std::string_view, 6> kReduceKinds = {"sum", "prod", "max", "min", "and", "or"};

}  // namespace

std::string_view OpCodeName(OpCode op) {
  const OpInfo* info = FindOp(op);
  return info ? info->name : "invalid-op";
}

OpClass ClassOf(OpCode op) {
  const OpInfo* info = FindOp(op);
  return info ? info->cls : OpClass::kLeaf;
}

int Arity(OpCode op) {
  const OpInfo* info = FindOp(op);
  return info ? info->arity : 0;
}

bool IsKnownOpCode(OpCode op) { return FindOp(op) != nullptr; }

OperandDTypes OperandDTypesOf(OpCode op) {
  const OpInfo* info = FindOp(op);
  return info ? info->operands : OperandDTypes::kAny;
}

ResultDType ResultDTypeOf(OpCode op) {
  const OpInfo* info = FindOp(op);
  return info ? info->result : ResultDType::kDeclared;
}

OpCost CostOf(OpCode op) {
  const OpInfo* info = FindOp(op);
  return info ? info->cost : OpCost::kCheap;
}

std::string_view CompareDirectionName(CompareDirection d) {
  auto i = static_cast<size_t>(d) - 1;
  return i < kDirections.size() ? kDirections[i] : "invalid-direction";
}

std::optional<CompareDirection> ParseCompareDirection(std::string_view s) {
  for (size_t i = 0; i < kDirections.size(); ++i) {
    if (kDirections[i] == s) return static_cast<CompareDirection>(i + 1);
  }
  return std::nullopt;
}

std::string_view ReduceKindName(ReduceKind k) {
  auto i = static_cast<size_t>(k) - 1;
  return i < kReduceKinds.size() ? kReduceKinds[i] : "invalid-reduce";
}

std::optional<ReduceKind> ParseReduceKind(std::string_view s) {
  for (size_t i = 0; i < kReduceKinds.size(); ++i) {
    if (kReduceKinds[i] == s) return static_cast<ReduceKind>(i + 1);
  }
  return std::nullopt;
}

int64_t Shape::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string Shape::ToString() const {
  std::string s(DTypeName(dtype));
  s += '[';
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  return s + ']';
}

std::vector<int> Graph::Parameters() const {
  std::vector<int> params;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    if (nodes[i].op == OpCode::kParameter) params.push_back(i);
  }
  std::stable_sort(params.begin(), params.end(), [&](int a, int b) {
    return nodes[a].parameter_number < nodes[b].parameter_number;
  });
  return params;
}

std::vector<std::vector<int>> Graph::Users() const {
  std::vector<std::vector<int>> users(nodes.size());
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (int o : nodes[i].operands) {
      if (o >= 0 && o < static_cast<int>(nodes.size())) users[o].push_back(i);
    }
  }
  return users;
}

std::vector<int> TopologicalOrder(const Graph& g) {
  // Iterative post-order DFS from every node in index order: deterministic, and it avoids
  // deep recursion on long chains (the threefry graphs are thousands of nodes deep).
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> order;
  order.reserve(n);
  std::vector<uint8_t> state(n, 0);  // 0 new, 1 on stack, 2 done
  std::vector<std::pair<int, size_t>> stack;
  for (int root = 0; root < n; ++root) {
    if (state[root]) continue;
    stack.push_back({root, 0});
    state[root] = 1;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const auto& ops = g.nodes[node].operands;
      if (next < ops.size()) {
        int o = ops[next++];
        if (o >= 0 && o < n && state[o] == 0) {
          state[o] = 1;
          stack.push_back({o, 0});
        }
        continue;
      }
      state[node] = 2;
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

std::vector<bool> ReachedFrom(const Graph& g, std::vector<int> roots) {
  std::vector<bool> reached(g.nodes.size(), false);
  while (!roots.empty()) {
    const int i = roots.back();
    roots.pop_back();
    if (reached[i]) continue;
    reached[i] = true;
    for (int o : g.nodes[i].operands) roots.push_back(o);
  }
  return reached;
}

std::vector<bool> LiveNodes(const Graph& g) { return ReachedFrom(g, g.outputs); }

namespace {

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

std::string ToText(const Graph& g) {
  std::ostringstream out;
  out << "graph " << (g.name.empty() ? "unnamed" : g.name) << " {\n";
  for (int i : TopologicalOrder(g)) {
    const Node& n = g.nodes[i];
    out << "  %" << i << " = " << n.shape.ToString() << ' ' << OpCodeName(n.op) << '(';
    for (size_t k = 0; k < n.operands.size(); ++k) out << (k ? ", %" : "%") << n.operands[k];
    out << ')';
    if (n.op == OpCode::kParameter) out << " number=" << n.parameter_number;
    if (!n.dimensions.empty()) out << " dimensions={" << JoinInts(n.dimensions) << '}';
    if (n.op == OpCode::kCompare) out << " direction=" << CompareDirectionName(n.direction);
    if (n.op == OpCode::kReduce) out << " combiner=" << ReduceKindName(n.reduce_kind);
    if (n.op == OpCode::kConstant && n.literal.size() == 1) {
      out << " value=";
      if (!n.literal.f.empty())
        out << n.literal.f[0];
      else
        out << n.literal.i[0];
    }
    if (!n.name.empty()) out << "  // " << n.name;
    out << '\n';
  }
  out << "  outputs: ";
  for (size_t k = 0; k < g.outputs.size(); ++k) out << (k ? ", %" : "%") << g.outputs[k];
  out << "\n}\n";
  return out.str();
}

Graph WithoutDeadNodes(Graph g) {
  std::vector<int> roots = g.outputs;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (g.nodes[k].op == OpCode::kParameter) roots.push_back(static_cast<int>(k));
  }
  const std::vector<bool> live = ReachedFrom(g, std::move(roots));
  Graph r;
  r.name = std::move(g.name);
  r.outer_parameters = std::move(g.outer_parameters);
  std::vector<int> remap(g.nodes.size(), -1);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!live[k]) continue;
    Node n = std::move(g.nodes[k]);
    for (int& o : n.operands) o = remap[o];
    remap[k] = r.Add(std::move(n));
  }
  for (int o : g.outputs) r.outputs.push_back(remap[o]);
  return r;
}

}  // namespace stitch
