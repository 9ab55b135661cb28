#include "stitch/compiler/graph.h"

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
};

constexpr std::array kOps = {
    OpInfo{OpCode::kParameter, "parameter", OpClass::kLeaf, 0},
    OpInfo{OpCode::kConstant, "constant", OpClass::kLeaf, 0},
    OpInfo{OpCode::kIota, "iota", OpClass::kLeaf, 0},
    OpInfo{OpCode::kNeg, "negate", OpClass::kElementwise, 1},
    OpInfo{OpCode::kAbs, "abs", OpClass::kElementwise, 1},
    OpInfo{OpCode::kExp, "exponential", OpClass::kElementwise, 1},
    OpInfo{OpCode::kLog, "log", OpClass::kElementwise, 1},
    OpInfo{OpCode::kLog1p, "log-plus-one", OpClass::kElementwise, 1},
    OpInfo{OpCode::kExpm1, "exponential-minus-one", OpClass::kElementwise, 1},
    OpInfo{OpCode::kTanh, "tanh", OpClass::kElementwise, 1},
    OpInfo{OpCode::kLogistic, "logistic", OpClass::kElementwise, 1},
    OpInfo{OpCode::kSqrt, "sqrt", OpClass::kElementwise, 1},
    OpInfo{OpCode::kRsqrt, "rsqrt", OpClass::kElementwise, 1},
    OpInfo{OpCode::kErf, "erf", OpClass::kElementwise, 1},
    OpInfo{OpCode::kSin, "sine", OpClass::kElementwise, 1},
    OpInfo{OpCode::kCos, "cosine", OpClass::kElementwise, 1},
    OpInfo{OpCode::kFloor, "floor", OpClass::kElementwise, 1},
    OpInfo{OpCode::kCeil, "ceil", OpClass::kElementwise, 1},
    OpInfo{OpCode::kRound, "round-nearest-afz", OpClass::kElementwise, 1},
    OpInfo{OpCode::kRoundNearestEven, "round-nearest-even", OpClass::kElementwise, 1},
    OpInfo{OpCode::kSign, "sign", OpClass::kElementwise, 1},
    OpInfo{OpCode::kNot, "not", OpClass::kElementwise, 1},
    OpInfo{OpCode::kConvert, "convert", OpClass::kElementwise, 1},
    OpInfo{OpCode::kBitcastConvert, "bitcast-convert", OpClass::kElementwise, 1},
    OpInfo{OpCode::kCbrt, "cbrt", OpClass::kElementwise, 1},
    OpInfo{OpCode::kTan, "tan", OpClass::kElementwise, 1},
    OpInfo{OpCode::kIsFinite, "is-finite", OpClass::kElementwise, 1},
    OpInfo{OpCode::kPopcnt, "popcnt", OpClass::kElementwise, 1},
    OpInfo{OpCode::kAdd, "add", OpClass::kElementwise, 2},
    OpInfo{OpCode::kSub, "subtract", OpClass::kElementwise, 2},
    OpInfo{OpCode::kMul, "multiply", OpClass::kElementwise, 2},
    OpInfo{OpCode::kDiv, "divide", OpClass::kElementwise, 2},
    OpInfo{OpCode::kPow, "power", OpClass::kElementwise, 2},
    OpInfo{OpCode::kMax, "maximum", OpClass::kElementwise, 2},
    OpInfo{OpCode::kMin, "minimum", OpClass::kElementwise, 2},
    OpInfo{OpCode::kRem, "remainder", OpClass::kElementwise, 2},
    OpInfo{OpCode::kAnd, "and", OpClass::kElementwise, 2},
    OpInfo{OpCode::kOr, "or", OpClass::kElementwise, 2},
    OpInfo{OpCode::kXor, "xor", OpClass::kElementwise, 2},
    OpInfo{OpCode::kShiftLeft, "shift-left", OpClass::kElementwise, 2},
    OpInfo{OpCode::kShiftRightLogical, "shift-right-logical", OpClass::kElementwise, 2},
    OpInfo{OpCode::kShiftRightArithmetic, "shift-right-arithmetic", OpClass::kElementwise, 2},
    OpInfo{OpCode::kCompare, "compare", OpClass::kElementwise, 2},
    OpInfo{OpCode::kAtan2, "atan2", OpClass::kElementwise, 2},
    OpInfo{OpCode::kSelect, "select", OpClass::kElementwise, 3},
    OpInfo{OpCode::kClamp, "clamp", OpClass::kElementwise, 3},
    OpInfo{OpCode::kBroadcast, "broadcast", OpClass::kDataMovement, 1},
    OpInfo{OpCode::kReshape, "reshape", OpClass::kDataMovement, 1},
    OpInfo{OpCode::kTranspose, "transpose", OpClass::kDataMovement, 1},
    OpInfo{OpCode::kSlice, "slice", OpClass::kDataMovement, 1},
    OpInfo{OpCode::kConcatenate, "concatenate", OpClass::kDataMovement, -1},
    OpInfo{OpCode::kPad, "pad", OpClass::kDataMovement, 2},
    OpInfo{OpCode::kReverse, "reverse", OpClass::kDataMovement, 1},
    OpInfo{OpCode::kReduce, "reduce", OpClass::kReduce, 2},
    OpInfo{OpCode::kRngUniform, "rng-uniform", OpClass::kRng, 1},
};

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

std::optional<OpCode> ParseOpCode(std::string_view name) {
  for (const auto& info : kOps) {
    if (info.name == name) return info.op;
  }
  return std::nullopt;
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

}  // namespace stitch
