// Lowering of parsed HLO to the stitch IR: op mapping, fusion inlining, tuple flattening,
// layout normalisation and batch-norm expansion.
#include "hlo/hlo_lower.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "stitch/compiler/verifier.h"

namespace stitch::hlo {
namespace {

const std::unordered_map<std::string_view, OpCode>& UnaryOps() {
  static const auto* m = new std::unordered_map<std::string_view, OpCode>{
      {"negate", OpCode::kNeg},
      {"abs", OpCode::kAbs},
      {"exponential", OpCode::kExp},
      {"log", OpCode::kLog},
      {"log-plus-one", OpCode::kLog1p},
      {"exponential-minus-one", OpCode::kExpm1},
      {"tanh", OpCode::kTanh},
      {"logistic", OpCode::kLogistic},
      {"sqrt", OpCode::kSqrt},
      {"rsqrt", OpCode::kRsqrt},
      {"cbrt", OpCode::kCbrt},
      {"erf", OpCode::kErf},
      {"sine", OpCode::kSin},
      {"cosine", OpCode::kCos},
      {"tan", OpCode::kTan},
      {"floor", OpCode::kFloor},
      {"ceil", OpCode::kCeil},
      {"round-nearest-afz", OpCode::kRound},
      {"round-nearest-even", OpCode::kRoundNearestEven},
      {"sign", OpCode::kSign},
      {"not", OpCode::kNot},
      {"is-finite", OpCode::kIsFinite},
      {"popcnt", OpCode::kPopcnt},
      {"convert", OpCode::kConvert},
      {"bitcast-convert", OpCode::kBitcastConvert},
  };
  return *m;
}

const std::unordered_map<std::string_view, OpCode>& BinaryOps() {
  static const auto* m = new std::unordered_map<std::string_view, OpCode>{
      {"add", OpCode::kAdd},
      {"subtract", OpCode::kSub},
      {"multiply", OpCode::kMul},
      {"divide", OpCode::kDiv},
      {"power", OpCode::kPow},
      {"maximum", OpCode::kMax},
      {"minimum", OpCode::kMin},
      {"remainder", OpCode::kRem},
      {"and", OpCode::kAnd},
      {"or", OpCode::kOr},
      {"xor", OpCode::kXor},
      {"shift-left", OpCode::kShiftLeft},
      {"shift-right-logical", OpCode::kShiftRightLogical},
      {"shift-right-arithmetic", OpCode::kShiftRightArithmetic},
      {"atan2", OpCode::kAtan2},
      {"compare", OpCode::kCompare},
  };
  return *m;
}

const std::set<std::string_view>& OtherOps() {
  static const auto* s = new std::set<std::string_view>{"parameter",
                                                        "constant",
                                                        "iota",
                                                        "select",
                                                        "clamp",
                                                        "broadcast",
                                                        "reshape",
                                                        "bitcast",
                                                        "transpose",
                                                        "slice",
                                                        "concatenate",
                                                        "pad",
                                                        "reverse",
                                                        "reduce",
                                                        "copy",
                                                        "tuple",
                                                        "get-tuple-element",
                                                        "fusion",
                                                        "batch-norm-training",
                                                        "batch-norm-grad"};
  return *s;
}

bool IsSupportedOpcode(std::string_view op) {
  return UnaryOps().count(op) || BinaryOps().count(op) || OtherOps().count(op);
}

std::optional<ReduceKind> ReduceKindOf(std::string_view opcode) {
  if (opcode == "add") return ReduceKind::kSum;
  if (opcode == "multiply") return ReduceKind::kProd;
  if (opcode == "maximum") return ReduceKind::kMax;
  if (opcode == "minimum") return ReduceKind::kMin;
  if (opcode == "and") return ReduceKind::kAnd;
  if (opcode == "or") return ReduceKind::kOr;
  return std::nullopt;
}

std::string Where(const std::string& source, int line) {
  return source + ":" + std::to_string(line);
}

std::string InsRef(const HloInstruction& ins, const std::string& source) {
  return "'" + ins.opcode + "' (instruction '" + ins.name + "') at " + Where(source, ins.line);
}

const HloComputation* FindComputation(const HloModule& m, std::string_view raw_name) {
  std::string name = StripPercent(raw_name);
  for (const auto& c : m.computations) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Recognises a reducer whose output i is `op(param i, param i+n)`; returns the kinds, or
// nullopt for any other computation (converts, index tracking, ...).
std::optional<std::vector<ReduceKind>> AnalyseReducer(const HloComputation& c, size_t n) {
  std::unordered_map<std::string, int> index;
  std::unordered_map<std::string, int64_t> param_no;
  for (size_t k = 0; k < c.instructions.size(); ++k) {
    const auto& ins = c.instructions[k];
    index[ins.name] = static_cast<int>(k);
    if (ins.opcode == "parameter") {
      auto v = ParseInt(ins.args_text);
      if (!v) return std::nullopt;
      param_no[ins.name] = *v;
    }
  }
  if (param_no.size() != 2 * n) return std::nullopt;
  auto combiner = [&](const HloInstruction& ins, size_t i) -> std::optional<ReduceKind> {
    auto kind = ReduceKindOf(ins.opcode);
    if (!kind || ins.operands.size() != 2) return std::nullopt;
    auto a = param_no.find(ins.operands[0].name);
    auto b = param_no.find(ins.operands[1].name);
    if (a == param_no.end() || b == param_no.end()) return std::nullopt;
    int64_t x = a->second, y = b->second;
    int64_t lhs = static_cast<int64_t>(i), rhs = static_cast<int64_t>(i + n);
    if (!((x == lhs && y == rhs) || (x == rhs && y == lhs))) return std::nullopt;
    return kind;
  };
  const auto& root = c.instructions[c.root];
  std::vector<ReduceKind> kinds;
  if (n == 1) {
    auto k = combiner(root, 0);
    if (!k) return std::nullopt;
    kinds.push_back(*k);
    return kinds;
  }
  if (root.opcode != "tuple" || root.operands.size() != n) return std::nullopt;
  for (size_t i = 0; i < n; ++i) {
    auto it = index.find(root.operands[i].name);
    if (it == index.end()) return std::nullopt;
    auto k = combiner(c.instructions[it->second], i);
    if (!k) return std::nullopt;
    kinds.push_back(*k);
  }
  return kinds;
}

// Checks that a written layout is a permutation of the rank; returns the minor-to-major
// order, or an empty vector when it is the default (row-major) one.
StatusOr<std::vector<int64_t>> NormaliseLayout(const HloShape& s, const std::string& where) {
  if (!s.minor_to_major || s.is_tuple) return std::vector<int64_t>{};
  const auto& m2m = *s.minor_to_major;
  int64_t rank = static_cast<int64_t>(s.dims.size());
  if (m2m.empty() && rank > 0) return std::vector<int64_t>{};  // "{}" means unspecified
  if (static_cast<int64_t>(m2m.size()) != rank) {
    return InvalidArgument(where + ": layout of " + s.ToString() + " has " +
                           std::to_string(m2m.size()) + " entries, expected " +
                           std::to_string(rank));
  }
  std::vector<bool> seen(rank, false);
  bool is_default = true;
  for (int64_t k = 0; k < rank; ++k) {
    int64_t d = m2m[k];
    if (d < 0 || d >= rank || seen[d]) {
      return InvalidArgument(where + ": layout of " + s.ToString() + " is not a permutation");
    }
    seen[d] = true;
    if (d != rank - 1 - k) is_default = false;
  }
  if (is_default) return std::vector<int64_t>{};
  return m2m;
}

// Major-to-minor order: physical dimension k holds logical dimension result[k].
std::vector<int64_t> MajorToMinor(const std::vector<int64_t>& m2m) {
  return std::vector<int64_t>(m2m.rbegin(), m2m.rend());
}

Status CheckShapeSupported(const HloShape& s, const std::string& where, int depth = 0) {
  if (depth > kMaxNesting) return InvalidArgument(where + ": tuple shape nesting too deep");
  if (s.omitted) return Status::Ok();
  if (s.is_tuple) {
    for (const auto& e : s.elements) {
      STITCH_RETURN_IF_ERROR(CheckShapeSupported(e, where, depth + 1));
    }
    return Status::Ok();
  }
  if (s.dynamic) {
    return Unimplemented(where + ": dynamic shape " + s.dtype +
                         "[...] (dimension written '<=' or '?') is not supported; stitch "
                         "signatures have static shapes");
  }
  if (!ParseDType(s.dtype)) {
    return Unimplemented(where + ": unsupported element type '" + s.dtype + "'");
  }
  return Status::Ok();
}

// A lowered HLO value: one IR node (with the layout its HLO shape declared), or a tuple.
struct Value {
  int node = -1;
  std::vector<int64_t> m2m;  // empty: default layout
  bool is_tuple = false;
  std::vector<Value> elems;
};

Value Leaf(int node) {
  Value v;
  v.node = node;
  return v;
}

class Lowerer {
 public:
  Lowerer(const HloModule& m, const HloImportOptions& opt) : m_(m), opt_(opt) {}

  StatusOr<Graph> Run(const HloComputation& comp, const std::string& graph_name) {
    g_.name = graph_name;
    STITCH_ASSIGN_OR_RETURN(Value root, LowerComp(comp, nullptr));
    const HloInstruction& root_ins = comp.instructions[comp.root];
    STITCH_RETURN_IF_ERROR(
        AddOutputs(root, &root_ins.shape, Where(opt_.source_name, root_ins.line), root_ins, 0));
    if (g_.outputs.empty()) {
      return InvalidArgument(Where(opt_.source_name, root_ins.line) + ": entry root '" +
                             root_ins.name + "' has no array outputs");
    }
    Graph pruned = Prune();
    if (static_cast<int64_t>(pruned.nodes.size()) > opt_.limits.max_nodes) {
      return ResourceExhausted(opt_.source_name + ": graph '" + graph_name + "' has " +
                               std::to_string(pruned.nodes.size()) + " nodes, over the limit of " +
                               std::to_string(opt_.limits.max_nodes));
    }
    Status st = Verify(pruned, opt_.limits);
    if (!st.ok()) return st.WithContext(opt_.source_name + ": graph '" + graph_name + "'");
    return pruned;
  }

 private:
  // ---- graph building helpers ----
  Status CheckBudget() {
    int64_t cap = opt_.limits.max_nodes * 2 + 1000;
    if (static_cast<int64_t>(g_.nodes.size()) > cap) {
      return ResourceExhausted(opt_.source_name + ": module '" + m_.name +
                               "' expands to more than " + std::to_string(cap) +
                               " nodes (fusions inlined)");
    }
    return Status::Ok();
  }

  int Add(Node n) {
    n.name = cur_name_ + n.name;
    n.source = cur_source_;
    return g_.Add(std::move(n));
  }

  const Shape& ShapeOf(int node) const { return g_.nodes[node].shape; }

  int Transpose(int x, const std::vector<int64_t>& perm, const std::string& suffix) {
    Node n;
    n.op = OpCode::kTranspose;
    n.operands = {x};
    n.dimensions = perm;
    n.shape.dtype = ShapeOf(x).dtype;
    for (int64_t p : perm) n.shape.dims.push_back(ShapeOf(x).dims[p]);
    n.name = suffix;
    return Add(std::move(n));
  }

  int Reshape(int x, const std::vector<int64_t>& dims, const std::string& suffix) {
    if (ShapeOf(x).dims == dims) return x;
    Node n;
    n.op = OpCode::kReshape;
    n.operands = {x};
    n.shape = {ShapeOf(x).dtype, dims};
    n.name = suffix;
    return Add(std::move(n));
  }

  int Broadcast(int x, const std::vector<int64_t>& dims, const std::vector<int64_t>& map,
                const std::string& suffix) {
    Node n;
    n.op = OpCode::kBroadcast;
    n.operands = {x};
    n.shape = {ShapeOf(x).dtype, dims};
    n.dimensions = map;
    n.name = suffix;
    return Add(std::move(n));
  }

  int ScalarConst(DType t, double v, const std::string& suffix) {
    Node n;
    n.op = OpCode::kConstant;
    n.shape = {t, {}};
    if (IsFloat(t)) {
      n.literal.f = {v};
    } else {
      n.literal.i = {static_cast<int64_t>(v)};
    }
    n.name = suffix;
    return Add(std::move(n));
  }

  int Bin(OpCode op, int a, int b, const std::string& suffix) {
    Node n;
    n.op = op;
    n.operands = {a, b};
    n.shape = ShapeOf(a);
    n.name = suffix;
    return Add(std::move(n));
  }

  int Un(OpCode op, int a, const std::string& suffix) {
    Node n;
    n.op = op;
    n.operands = {a};
    n.shape = ShapeOf(a);
    n.name = suffix;
    return Add(std::move(n));
  }

  int ReduceSum(int x, const std::vector<int64_t>& dims, const std::string& suffix) {
    const Shape s = ShapeOf(x);  // a copy: Add() below may move the nodes
    int zero = ScalarConst(s.dtype, 0, suffix + ".init");
    Node n;
    n.op = OpCode::kReduce;
    n.reduce_kind = ReduceKind::kSum;
    n.operands = {x, zero};
    n.dimensions = dims;
    n.shape.dtype = s.dtype;
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (!std::binary_search(dims.begin(), dims.end(), d)) n.shape.dims.push_back(s.dims[d]);
    }
    n.name = suffix;
    return Add(std::move(n));
  }

  // ---- shapes ----
  StatusOr<Shape> ArrayShape(const HloShape& s, const std::string& where) {
    if (s.is_tuple) return InvalidArgument(where + ": expected an array shape, got a tuple");
    STITCH_RETURN_IF_ERROR(CheckShapeSupported(s, where));
    Shape r;
    r.dtype = *ParseDType(s.dtype);
    r.dims = s.dims;
    if (static_cast<int>(r.dims.size()) > opt_.limits.max_rank) {
      return ResourceExhausted(where + ": rank " + std::to_string(r.dims.size()) +
                               " is over the limit of " + std::to_string(opt_.limits.max_rank));
    }
    int64_t e = 1;
    for (int64_t d : r.dims) {
      if (d != 0 && e > std::numeric_limits<int64_t>::max() / d) {
        return ResourceExhausted(where + ": element count of " + s.ToString() + " overflows");
      }
      e *= d;
    }
    if (e > opt_.limits.max_elements_per_tensor) {
      return ResourceExhausted(where + ": " + s.ToString() + " has more elements than the limit");
    }
    return r;
  }

  // The declared shape, or for an elementwise op written without one, its operand's.
  StatusOr<Shape> InstrShape(const HloInstruction& ins, const std::vector<const Value*>& ov,
                             const std::string& where) {
    if (!ins.shape.omitted) return ArrayShape(ins.shape, where);
    const std::string& op = ins.opcode;
    bool same_as_operand = (UnaryOps().count(op) && op != "convert" && op != "bitcast-convert") ||
                           (BinaryOps().count(op)) || op == "select" || op == "clamp" ||
                           op == "copy";
    size_t from = (op == "select" || op == "clamp") ? 1 : 0;
    if (!same_as_operand || ov.size() <= from || ov[from]->is_tuple || ov[from]->node < 0) {
      return InvalidArgument(where + ": the shape of " + op + " '" + ins.name +
                             "' is omitted and cannot be inferred; write it");
    }
    Shape s = ShapeOf(ov[from]->node);
    if (op == "compare" || op == "is-finite") s.dtype = DType::kPred;
    return s;
  }

  // ---- outputs ----
  Status AddOutputs(const Value& v, const HloShape* declared, const std::string& where,
                    const HloInstruction& root, int depth) {
    if (depth > kMaxNesting) return InvalidArgument(where + ": output tuple nesting too deep");
    if (v.is_tuple) {
      for (size_t k = 0; k < v.elems.size(); ++k) {
        const HloShape* d = nullptr;
        if (declared && declared->is_tuple && declared->elements.size() == v.elems.size()) {
          d = &declared->elements[k];
        }
        STITCH_RETURN_IF_ERROR(AddOutputs(v.elems[k], d, where, root, depth + 1));
      }
      return Status::Ok();
    }
    int node = v.node;
    if (declared && !declared->is_tuple) {
      STITCH_ASSIGN_OR_RETURN(auto m2m, NormaliseLayout(*declared, where));
      if (!m2m.empty() && static_cast<int>(m2m.size()) == ShapeOf(node).rank()) {
        cur_name_ = root.name;
        cur_source_ = where;
        node = Transpose(node, MajorToMinor(m2m), ".physical");
      }
    }
    g_.outputs.push_back(node);
    return Status::Ok();
  }

  // Drops nodes that reach no output (parameters stay: they are the signature).
  Graph Prune() {
    std::vector<bool> live(g_.nodes.size(), false);
    std::vector<int> stack(g_.outputs.begin(), g_.outputs.end());
    for (size_t k = 0; k < g_.nodes.size(); ++k) {
      if (g_.nodes[k].op == OpCode::kParameter) stack.push_back(static_cast<int>(k));
    }
    while (!stack.empty()) {
      int n = stack.back();
      stack.pop_back();
      if (live[n]) continue;
      live[n] = true;
      for (int o : g_.nodes[n].operands) stack.push_back(o);
    }
    Graph r;
    r.name = g_.name;
    std::vector<int> remap(g_.nodes.size(), -1);
    for (size_t k = 0; k < g_.nodes.size(); ++k) {
      if (!live[k]) continue;
      Node n = std::move(g_.nodes[k]);
      for (int& o : n.operands) o = remap[o];
      remap[k] = r.Add(std::move(n));
    }
    for (int o : g_.outputs) r.outputs.push_back(remap[o]);
    return r;
  }

  // ---- computations ----
  StatusOr<Value> LowerComp(const HloComputation& c, const std::vector<Value>* args) {
    if (++depth_ > kMaxNesting) {
      return InvalidArgument(Where(opt_.source_name, c.line) + ": fusions nested more than " +
                             std::to_string(kMaxNesting) + " deep");
    }
    if (active_.count(&c)) {
      return InvalidArgument(Where(opt_.source_name, c.line) + ": computation '" + c.name +
                             "' calls itself");
    }
    active_.insert(&c);
    auto r = LowerCompBody(c, args);
    active_.erase(&c);
    --depth_;
    return r;
  }

  StatusOr<Value> LowerCompBody(const HloComputation& c, const std::vector<Value>* args) {
    const auto& ins = c.instructions;
    std::unordered_map<std::string, int> index;
    for (size_t k = 0; k < ins.size(); ++k) {
      if (!index.emplace(ins[k].name, static_cast<int>(k)).second) {
        return InvalidArgument(Where(opt_.source_name, ins[k].line) + ": instruction name '" +
                               ins[k].name + "' is defined twice in '" + c.name + "'");
      }
    }
    // Operand indices, then a post-order from the root with an explicit stack (no recursion
    // on the instruction chain, whatever its length).
    std::vector<std::vector<int>> opnds(ins.size());
    for (size_t k = 0; k < ins.size(); ++k) {
      for (const auto& o : ins[k].operands) {
        auto it = index.find(o.name);
        if (it == index.end()) {
          // parameter(0), iota() etc. carry no operand names; others must resolve.
          if (ins[k].opcode == "parameter") break;
          return InvalidArgument(Where(opt_.source_name, ins[k].line) + ": operand '" + o.name +
                                 "' of '" + ins[k].name + "' is not defined in '" + c.name + "'");
        }
        opnds[k].push_back(it->second);
      }
    }
    std::vector<int> order;
    std::vector<uint8_t> state(ins.size(), 0);  // 0 new, 1 on stack, 2 done
    std::vector<std::pair<int, size_t>> stack = {{c.root, 0}};
    state[c.root] = 1;
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < opnds[n].size()) {
        int o = opnds[n][next++];
        if (state[o] == 1) {
          return InvalidArgument(Where(opt_.source_name, ins[o].line) + ": instruction '" +
                                 ins[o].name + "' depends on itself");
        }
        if (state[o] == 0) {
          state[o] = 1;
          stack.push_back({o, 0});
        }
      } else {
        state[n] = 2;
        order.push_back(n);
        stack.pop_back();
      }
    }
    std::vector<Value> vals(ins.size());
    if (!args) {
      // Top level: every parameter is part of the signature, live or not.
      std::vector<std::pair<int64_t, int>> params;
      for (size_t k = 0; k < ins.size(); ++k) {
        if (ins[k].opcode != "parameter") continue;
        auto no = ParseInt(ins[k].args_text);
        if (!no || *no < 0) {
          return InvalidArgument(Where(opt_.source_name, ins[k].line) +
                                 ": expected a parameter number in '" + ins[k].name + "'");
        }
        params.push_back({*no, static_cast<int>(k)});
      }
      std::sort(params.begin(), params.end());
      for (size_t p = 0; p < params.size(); ++p) {
        if (params[p].first != static_cast<int64_t>(p)) {
          return InvalidArgument(
              Where(opt_.source_name, ins[params[p].second].line) + ": parameter numbers of '" +
              c.name + "' are not 0..n-1 (missing or repeated " + std::to_string(p) + ")");
        }
        const HloInstruction& pi = ins[params[p].second];
        SetCursor(pi);
        std::string where = Where(opt_.source_name, pi.line);
        STITCH_ASSIGN_OR_RETURN(vals[params[p].second], MakeParameter(pi.shape, where, 0));
        state[params[p].second] = 3;
      }
    }
    for (int k : order) {
      if (state[k] == 3) continue;  // top-level parameter, already made
      STITCH_RETURN_IF_ERROR(CheckBudget());
      std::vector<const Value*> ov;
      for (int o : opnds[k]) ov.push_back(&vals[o]);
      std::vector<const HloInstruction*> oi;
      for (int o : opnds[k]) oi.push_back(&ins[o]);
      SetCursor(ins[k]);
      STITCH_ASSIGN_OR_RETURN(vals[k], LowerInstr(ins[k], ov, oi, args));
    }
    return vals[c.root];
  }

  void SetCursor(const HloInstruction& ins) {
    cur_name_ = ins.name;
    cur_source_ = Where(opt_.source_name, ins.line);
  }

  StatusOr<Value> MakeParameter(const HloShape& s, const std::string& where, int depth) {
    if (depth > kMaxNesting) return InvalidArgument(where + ": parameter tuple nesting too deep");
    Value v;
    if (s.is_tuple) {
      v.is_tuple = true;
      for (size_t k = 0; k < s.elements.size(); ++k) {
        STITCH_ASSIGN_OR_RETURN(Value e, MakeParameter(s.elements[k], where, depth + 1));
        v.elems.push_back(std::move(e));
      }
      return v;
    }
    STITCH_ASSIGN_OR_RETURN(Shape shape, ArrayShape(s, where));
    STITCH_ASSIGN_OR_RETURN(auto m2m, NormaliseLayout(s, where));
    Node n;
    n.op = OpCode::kParameter;
    n.parameter_number = next_param_++;
    n.shape = shape;
    if (!m2m.empty()) {
      // The buffer holds the value in layout order: read it as such, then restore the
      // logical order with a transpose.
      auto major = MajorToMinor(m2m);
      n.shape.dims.clear();
      for (int64_t d : major) n.shape.dims.push_back(shape.dims[d]);
      int p = Add(std::move(n));
      std::vector<int64_t> inv(major.size());
      for (size_t k = 0; k < major.size(); ++k) inv[major[k]] = static_cast<int64_t>(k);
      v.node = Transpose(p, inv, ".logical");
      v.m2m = m2m;
    } else {
      v.node = Add(std::move(n));
    }
    return v;
  }

  // ---- instructions ----
  StatusOr<Value> LowerInstr(const HloInstruction& ins, const std::vector<const Value*>& ov,
                             const std::vector<const HloInstruction*>& oi,
                             const std::vector<Value>* args) {
    const std::string where = Where(opt_.source_name, ins.line);
    const std::string& op = ins.opcode;
    if (!IsSupportedOpcode(op)) {
      return Unimplemented("unsupported op '" + op + "' (instruction '" + ins.name + "') at " +
                           where);
    }
    auto fail = [&](const std::string& what) {
      return InvalidArgument(where + ": " + op + " '" + ins.name + "': " + what);
    };
    auto need = [&](size_t n) -> Status {
      if (ov.size() != n) {
        return fail("expected " + std::to_string(n) + " operands, got " +
                    std::to_string(ov.size()));
      }
      return Status::Ok();
    };
    auto array = [&](size_t k) -> StatusOr<int> {
      if (ov[k]->is_tuple || ov[k]->node < 0) {
        return fail("operand " + std::to_string(k) + " ('" + oi[k]->name + "') is a tuple");
      }
      return ov[k]->node;
    };
    auto int_list = [&](const char* key, bool required) -> StatusOr<std::vector<int64_t>> {
      auto it = ins.attrs.find(key);
      if (it == ins.attrs.end()) {
        if (required) return fail(std::string("missing attribute '") + key + "'");
        return std::vector<int64_t>{};
      }
      auto v = ParseIntList(it->second);
      if (!v) return fail(std::string("expected ") + key + "={i,j,...}, got '" + it->second + "'");
      return *v;
    };

    if (op == "tuple") {
      Value v;
      v.is_tuple = true;
      for (const Value* o : ov) v.elems.push_back(*o);
      return v;
    }
    if (op == "get-tuple-element") {
      STITCH_RETURN_IF_ERROR(need(1));
      auto it = ins.attrs.find("index");
      std::optional<int64_t> idx = it == ins.attrs.end() ? std::nullopt : ParseInt(it->second);
      if (!idx) return fail("expected index=<n>");
      if (!ov[0]->is_tuple || *idx < 0 || *idx >= static_cast<int64_t>(ov[0]->elems.size())) {
        return fail("index " + std::to_string(*idx) + " is out of range of '" + oi[0]->name + "'");
      }
      return ov[0]->elems[*idx];
    }
    if (op == "parameter") {
      auto no = ParseInt(ins.args_text);
      if (!no || *no < 0) return fail("expected a parameter number");
      if (!args) return fail("unexpected parameter");  // top-level ones are made up front
      if (*no >= static_cast<int64_t>(args->size())) {
        return fail("parameter " + std::to_string(*no) + " but the caller passes " +
                    std::to_string(args->size()) + " operands");
      }
      return (*args)[*no];
    }
    if (op == "fusion") {
      auto it = ins.attrs.find("calls");
      if (it == ins.attrs.end()) return fail("missing attribute 'calls'");
      const HloComputation* callee = FindComputation(m_, it->second);
      if (!callee) return fail("calls unknown computation '" + it->second + "'");
      std::vector<Value> call_args;
      for (const Value* o : ov) call_args.push_back(*o);
      STITCH_ASSIGN_OR_RETURN(Value r, LowerComp(*callee, &call_args));
      // The fusion's own shape decides the layout of its result.
      if (!r.is_tuple && !ins.shape.is_tuple) {
        STITCH_ASSIGN_OR_RETURN(r.m2m, NormaliseLayout(ins.shape, where));
      }
      return r;
    }
    if (op == "batch-norm-training" || op == "batch-norm-grad")
      return BatchNorm(ins, ov, oi, where);
    if (op == "reduce") return Reduce(ins, ov, oi, where);

    STITCH_ASSIGN_OR_RETURN(Shape shape, InstrShape(ins, ov, where));
    Value v;
    STITCH_ASSIGN_OR_RETURN(v.m2m, NormaliseLayout(ins.shape, where));
    Node n;
    n.shape = shape;

    if (op == "copy") {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(v.node, array(0));
      // A copy changes the physical layout only; the logical value is unchanged. Any layout
      // difference becomes a transpose where the value enters or leaves the graph.
      if (ShapeOf(v.node) != shape) return fail("result shape differs from the operand's");
      return v;
    }
    if (op == "constant") {
      STITCH_RETURN_IF_ERROR(ParseLiteral(ins.args_text, shape, &n.literal, fail));
      n.op = OpCode::kConstant;
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "iota") {
      STITCH_RETURN_IF_ERROR(need(0));
      auto it = ins.attrs.find("iota_dimension");
      std::optional<int64_t> d = it == ins.attrs.end() ? std::nullopt : ParseInt(it->second);
      if (!d) return fail("expected iota_dimension=<n>");
      n.op = OpCode::kIota;
      n.dimensions = {*d};
      v.node = Add(std::move(n));
      return v;
    }
    if (auto u = UnaryOps().find(op); u != UnaryOps().end()) {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      n.op = u->second;
      n.operands = {a};
      v.node = Add(std::move(n));
      return v;
    }
    if (auto b = BinaryOps().find(op); b != BinaryOps().end()) {
      STITCH_RETURN_IF_ERROR(need(2));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      STITCH_ASSIGN_OR_RETURN(int c, array(1));
      n.op = b->second;
      n.operands = {a, c};
      if (n.op == OpCode::kCompare) {
        auto it = ins.attrs.find("direction");
        if (it == ins.attrs.end()) return fail("missing attribute 'direction'");
        auto d = ParseCompareDirection(it->second);
        if (!d) return fail("unknown comparison direction '" + it->second + "'");
        n.direction = *d;
      }
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "select" || op == "clamp") {
      STITCH_RETURN_IF_ERROR(need(3));
      std::vector<int> x(3);
      for (size_t k = 0; k < 3; ++k) {
        STITCH_ASSIGN_OR_RETURN(x[k], array(k));
      }
      // Scalar predicates and bounds are legal HLO; the IR wants them broadcast.
      std::vector<size_t> bcast =
          op == "select" ? std::vector<size_t>{0} : std::vector<size_t>{0, 2};
      for (size_t k : bcast) {
        if (ShapeOf(x[k]).rank() == 0 && shape.rank() > 0) {
          x[k] = Broadcast(x[k], shape.dims, {}, ".bcast" + std::to_string(k));
        }
      }
      n.op = op == "select" ? OpCode::kSelect : OpCode::kClamp;
      n.operands = x;
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "broadcast") {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      STITCH_ASSIGN_OR_RETURN(n.dimensions, int_list("dimensions", true));
      n.op = OpCode::kBroadcast;
      n.operands = {a};
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "reshape") {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      n.op = OpCode::kReshape;
      n.operands = {a};
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "bitcast") {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      if (ShapeOf(a).dtype != shape.dtype) {
        return Unimplemented(where + ": bitcast '" + ins.name +
                             "' changes the element type; use bitcast-convert");
      }
      // A bitcast reinterprets the buffer: go to physical order, reshape, come back.
      const std::vector<int64_t>& in_m2m = ov[0]->m2m;
      int phys = a;
      if (!in_m2m.empty() && static_cast<int>(in_m2m.size()) == ShapeOf(a).rank()) {
        phys = Transpose(a, MajorToMinor(in_m2m), ".in_physical");
      }
      std::vector<int64_t> out_major;
      std::vector<int64_t> phys_dims = shape.dims;
      if (!v.m2m.empty()) {
        out_major = MajorToMinor(v.m2m);
        for (size_t k = 0; k < out_major.size(); ++k) phys_dims[k] = shape.dims[out_major[k]];
      }
      int64_t in_elems = 1, out_elems = 1;
      for (int64_t d : ShapeOf(a).dims) in_elems *= d;
      for (int64_t d : phys_dims) out_elems *= d;
      if (in_elems != out_elems) return fail("element count differs from the operand's");
      int r = Reshape(phys, phys_dims, "");
      if (!out_major.empty()) {
        std::vector<int64_t> inv(out_major.size());
        for (size_t k = 0; k < out_major.size(); ++k) inv[out_major[k]] = static_cast<int64_t>(k);
        r = Transpose(r, inv, ".logical");
      }
      v.node = r;
      return v;
    }
    if (op == "transpose" || op == "reverse") {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      STITCH_ASSIGN_OR_RETURN(n.dimensions, int_list("dimensions", true));
      n.op = op == "transpose" ? OpCode::kTranspose : OpCode::kReverse;
      n.operands = {a};
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "slice") {
      STITCH_RETURN_IF_ERROR(need(1));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      auto it = ins.attrs.find("slice");
      if (it == ins.attrs.end()) return fail("missing attribute 'slice'");
      auto sl = ParseSliceAttr(it->second);
      if (!sl) return fail("expected slice={[start:limit:stride], ...}, got '" + it->second + "'");
      for (const auto& d : *sl) {
        n.slice_starts.push_back(d.start);
        n.slice_limits.push_back(d.limit);
        n.slice_strides.push_back(d.stride);
      }
      n.op = OpCode::kSlice;
      n.operands = {a};
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "concatenate") {
      if (ov.empty()) return fail("expected at least one operand");
      for (size_t k = 0; k < ov.size(); ++k) {
        STITCH_ASSIGN_OR_RETURN(int a, array(k));
        n.operands.push_back(a);
      }
      STITCH_ASSIGN_OR_RETURN(n.dimensions, int_list("dimensions", true));
      n.op = OpCode::kConcatenate;
      v.node = Add(std::move(n));
      return v;
    }
    if (op == "pad") {
      STITCH_RETURN_IF_ERROR(need(2));
      STITCH_ASSIGN_OR_RETURN(int a, array(0));
      STITCH_ASSIGN_OR_RETURN(int pv, array(1));
      auto it = ins.attrs.find("padding");
      if (it == ins.attrs.end()) return fail("missing attribute 'padding'");
      auto pd = ParsePaddingAttr(it->second);
      if (!pd) return fail("expected padding=low_high[_interior]x..., got '" + it->second + "'");
      for (const auto& d : *pd) {
        n.pad_low.push_back(d.low);
        n.pad_high.push_back(d.high);
        n.pad_interior.push_back(d.interior);
      }
      n.op = OpCode::kPad;
      n.operands = {a, pv};
      v.node = Add(std::move(n));
      return v;
    }
    return Unimplemented("unsupported op " + InsRef(ins, opt_.source_name));
  }

  StatusOr<Value> Reduce(const HloInstruction& ins, const std::vector<const Value*>& ov,
                         const std::vector<const HloInstruction*>& oi, const std::string& where) {
    auto fail = [&](const std::string& what) {
      return InvalidArgument(where + ": reduce '" + ins.name + "': " + what);
    };
    if (ov.empty() || ov.size() % 2 != 0) return fail("expected N inputs and N init values");
    size_t n = ov.size() / 2;
    auto it = ins.attrs.find("to_apply");
    if (it == ins.attrs.end()) return fail("missing attribute 'to_apply'");
    const HloComputation* reducer = FindComputation(m_, it->second);
    if (!reducer) return fail("to_apply names unknown computation '" + it->second + "'");
    auto kinds = AnalyseReducer(*reducer, n);
    if (!kinds) {
      return Unimplemented(where + ": reduce '" + ins.name + "' uses reducer '" + reducer->name +
                           "', which is not " +
                           (n == 1 ? std::string("one add/multiply/maximum/minimum/and/or of its "
                                                 "two parameters")
                                   : std::string("separable into add/multiply/maximum/minimum/"
                                                 "and/or of each input pair")));
    }
    auto dit = ins.attrs.find("dimensions");
    if (dit == ins.attrs.end()) return fail("missing attribute 'dimensions'");
    auto dims = ParseIntList(dit->second);
    if (!dims) return fail("expected dimensions={i,j,...}");
    std::sort(dims->begin(), dims->end());
    if (n > 1 && (!ins.shape.is_tuple || ins.shape.elements.size() != n)) {
      return fail("a reduce of " + std::to_string(n) + " inputs must have a tuple shape of " +
                  std::to_string(n) + " elements");
    }
    Value result;
    result.is_tuple = n > 1;
    for (size_t i = 0; i < n; ++i) {
      const HloShape& hs = n > 1 ? ins.shape.elements[i] : ins.shape;
      STITCH_ASSIGN_OR_RETURN(Shape shape, ArrayShape(hs, where));
      if (ov[i]->is_tuple || ov[i + n]->is_tuple) {
        return fail("operand '" + oi[i]->name + "' or '" + oi[i + n]->name + "' is a tuple");
      }
      Node node;
      node.op = OpCode::kReduce;
      node.reduce_kind = (*kinds)[i];
      node.operands = {ov[i]->node, ov[i + n]->node};
      node.dimensions = *dims;
      node.shape = shape;
      if (n > 1) node.name = "." + std::to_string(i);
      Value e;
      STITCH_ASSIGN_OR_RETURN(e.m2m, NormaliseLayout(hs, where));
      e.node = Add(std::move(node));
      if (n == 1) return e;
      result.elems.push_back(std::move(e));
    }
    return result;
  }

  // Expands batch-norm-training and batch-norm-grad as XLA's documentation defines them:
  // statistics over every dimension except feature_index, biased variance.
  StatusOr<Value> BatchNorm(const HloInstruction& ins, const std::vector<const Value*>& ov,
                            const std::vector<const HloInstruction*>& oi,
                            const std::string& where) {
    const bool training = ins.opcode == "batch-norm-training";
    auto fail = [&](const std::string& what) {
      return InvalidArgument(where + ": " + ins.opcode + " '" + ins.name + "': " + what);
    };
    size_t want = training ? 3 : 5;
    if (ov.size() != want) {
      return fail("expected " + std::to_string(want) + " operands, got " +
                  std::to_string(ov.size()));
    }
    std::vector<int> x(want);
    for (size_t k = 0; k < want; ++k) {
      if (ov[k]->is_tuple) return fail("operand '" + oi[k]->name + "' is a tuple");
      x[k] = ov[k]->node;
    }
    auto eit = ins.attrs.find("epsilon");
    auto fit = ins.attrs.find("feature_index");
    if (eit == ins.attrs.end() || fit == ins.attrs.end()) {
      return fail("expected epsilon= and feature_index=");
    }
    auto eps = ParseFloat(eit->second);
    auto fi = ParseInt(fit->second);
    const Shape in = ShapeOf(x[0]);
    if (!eps || !fi || *fi < 0 || *fi >= in.rank()) {
      return fail("bad epsilon or feature_index");
    }
    if (!IsFloat(in.dtype)) return fail("operand must be floating point");
    const int64_t c = in.dims[*fi];
    const Shape feat{in.dtype, {c}};
    for (size_t k = 1; k < want; ++k) {
      if (k == 4 && !training) {
        if (ShapeOf(x[k]) != in) return fail("grad_output must have the operand's shape");
      } else if (ShapeOf(x[k]) != feat) {
        return fail("operand " + std::to_string(k) + " must be " + feat.ToString());
      }
    }
    std::vector<int64_t> rdims;
    double count = 1;
    for (int64_t d = 0; d < in.rank(); ++d) {
      if (d != *fi) {
        rdims.push_back(d);
        count *= static_cast<double>(in.dims[d]);
      }
    }
    const DType t = in.dtype;
    auto bcast = [&](int v, const std::string& s) { return Broadcast(v, in.dims, {*fi}, s); };
    auto feat_const = [&](double val, const std::string& s) {
      return Broadcast(ScalarConst(t, val, s + ".scalar"), {c}, {}, s);
    };
    int inv_n = feat_const(count > 0 ? 1.0 / count : 0.0, ".inv_count");
    Value r;
    r.is_tuple = true;
    if (training) {
      int mean = Bin(OpCode::kMul, ReduceSum(x[0], rdims, ".sum"), inv_n, ".mean");
      int centered = Bin(OpCode::kSub, x[0], bcast(mean, ".mean_b"), ".centered");
      int sq = Bin(OpCode::kMul, centered, centered, ".sq");
      int var = Bin(OpCode::kMul, ReduceSum(sq, rdims, ".sq_sum"), inv_n, ".var");
      int inv_std = Un(OpCode::kRsqrt, Bin(OpCode::kAdd, var, feat_const(*eps, ".eps"), ".var_eps"),
                       ".inv_std");
      int scaled =
          Bin(OpCode::kMul, bcast(inv_std, ".inv_std_b"), bcast(x[1], ".scale_b"), ".factor");
      int out = Bin(OpCode::kAdd, Bin(OpCode::kMul, centered, scaled, ".normed"),
                    bcast(x[2], ".offset_b"), ".output");
      r.elems = {Leaf(out), Leaf(mean), Leaf(var)};
    } else {
      const int grad = x[4];
      int centered = Bin(OpCode::kSub, x[0], bcast(x[2], ".mean_b"), ".centered");
      int inv_std = Un(OpCode::kRsqrt,
                       Bin(OpCode::kAdd, x[3], feat_const(*eps, ".eps"), ".var_eps"), ".inv_std");
      int grad_offset = ReduceSum(grad, rdims, ".grad_offset");
      int sum_gc = ReduceSum(Bin(OpCode::kMul, grad, centered, ".gc"), rdims, ".gc_sum");
      int grad_scale = Bin(OpCode::kMul, sum_gc, inv_std, ".grad_scale");
      // grad_x = scale * inv_std * (g - mean(g) - (x - mean) * mean(g * (x - mean)) * inv_std^2)
      int inv_std_b = bcast(inv_std, ".inv_std_b");
      int mean_g = bcast(Bin(OpCode::kMul, grad_offset, inv_n, ".mean_g"), ".mean_g_b");
      int mean_gc = bcast(Bin(OpCode::kMul, sum_gc, inv_n, ".mean_gc"), ".mean_gc_b");
      int inv_var = Bin(OpCode::kMul, inv_std_b, inv_std_b, ".inv_var");
      int corr =
          Bin(OpCode::kMul, Bin(OpCode::kMul, centered, mean_gc, ".corr0"), inv_var, ".corr");
      int diff = Bin(OpCode::kSub, Bin(OpCode::kSub, grad, mean_g, ".g_centered"), corr, ".diff");
      int factor = Bin(OpCode::kMul, bcast(x[1], ".scale_b"), inv_std_b, ".factor");
      int grad_x = Bin(OpCode::kMul, factor, diff, ".grad_operand");
      r.elems = {Leaf(grad_x), Leaf(grad_scale), Leaf(grad_offset)};
    }
    // The declared result must agree with the expansion.
    if (!ins.shape.is_tuple || ins.shape.elements.size() != 3) {
      return fail("expected a 3-tuple result shape, got " + ins.shape.ToString());
    }
    for (size_t k = 0; k < 3; ++k) {
      STITCH_ASSIGN_OR_RETURN(Shape s, ArrayShape(ins.shape.elements[k], where));
      if (s != ShapeOf(r.elems[k].node)) {
        return fail("result element " + std::to_string(k) + " is declared " + s.ToString() +
                    " but computes " + ShapeOf(r.elems[k].node).ToString());
      }
      STITCH_ASSIGN_OR_RETURN(r.elems[k].m2m, NormaliseLayout(ins.shape.elements[k], where));
    }
    return r;
  }

  // ---- literals ----
  template <typename Fail>
  Status ParseLiteral(const std::string& text, const Shape& shape, Literal* lit, Fail fail) {
    std::string_view s = text;
    size_t i = 0;
    auto skip = [&] {
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    };
    const bool is_float = IsFloat(shape.dtype);
    const int64_t expected = [&] {
      int64_t e = 1;
      for (int64_t d : shape.dims) e *= d;
      return e;
    }();
    auto scalar = [&]() -> Status {
      skip();
      size_t b = i;
      while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != '{' && s[i] != ' ' &&
             s[i] != '\n' && s[i] != '\t' && s[i] != '\r') {
        ++i;
      }
      std::string_view w = s.substr(b, i - b);
      if (w.empty()) return fail("expected a literal value");
      if (static_cast<int64_t>(lit->size()) >= expected) {
        return fail("literal has more than the " + std::to_string(expected) + " elements of " +
                    shape.ToString());
      }
      double fv = 0;
      int64_t iv = 0;
      bool have_int = false;
      if (w == "true") {
        fv = 1, iv = 1, have_int = true;
      } else if (w == "false") {
        fv = 0, iv = 0, have_int = true;
      } else if (w == "inf" || w == "+inf") {
        fv = std::numeric_limits<double>::infinity();
      } else if (w == "-inf") {
        fv = -std::numeric_limits<double>::infinity();
      } else if (w == "nan" || w == "-nan" || w == "+nan") {
        fv = std::numeric_limits<double>::quiet_NaN();
      } else {
        std::string_view digits = w;
        bool neg = false;
        if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
          neg = digits[0] == '-';
          digits.remove_prefix(1);
        }
        uint64_t u = 0;
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), u);
        if (ec == std::errc() && p == digits.data() + digits.size() && !digits.empty()) {
          if (neg && u > (uint64_t{1} << 63))
            return fail("integer literal '" + std::string(w) + "' is out of range");
          iv = neg ? static_cast<int64_t>(0 - u) : static_cast<int64_t>(u);
          fv = neg ? -static_cast<double>(u) : static_cast<double>(u);
          have_int = true;
        } else {
          auto f = ParseFloat(w);
          if (!f) return fail("bad literal value '" + std::string(w) + "'");
          fv = *f;
        }
      }
      if (is_float) {
        lit->f.push_back(fv);
      } else {
        if (!have_int) {
          if (!std::isfinite(fv) || fv != std::floor(fv) || std::fabs(fv) > 9.2e18) {
            return fail("literal '" + std::string(w) + "' is not a " +
                        std::string(DTypeName(shape.dtype)) + " value");
          }
          iv = static_cast<int64_t>(fv);
        }
        lit->i.push_back(iv);
      }
      return Status::Ok();
    };
    // Parses a nested list at `depth`, checking each level's length against the shape.
    std::function<Status(int)> list = [&](int depth) -> Status {
      skip();
      if (depth > shape.rank() || depth > kMaxNesting) {
        return fail("literal is nested deeper than the rank of " + shape.ToString());
      }
      if (i >= s.size() || s[i] != '{') {
        if (depth == shape.rank()) return scalar();
        if (depth == 0) return scalar();  // one value for the whole shape: a splat
        return fail("expected '{' at nesting level " + std::to_string(depth) + " of the literal");
      }
      if (depth == shape.rank()) return fail("literal is nested deeper than the rank");
      ++i;
      int64_t count = 0;
      skip();
      if (i < s.size() && s[i] == '}') {
        ++i;
      } else {
        while (true) {
          STITCH_RETURN_IF_ERROR(list(depth + 1));
          ++count;
          skip();
          if (i < s.size() && s[i] == ',') {
            ++i;
            continue;
          }
          if (i < s.size() && s[i] == '}') {
            ++i;
            break;
          }
          return fail("expected ',' or '}' in the literal");
        }
      }
      if (count != shape.dims[depth]) {
        return fail("literal has " + std::to_string(count) + " entries at level " +
                    std::to_string(depth) + ", the shape " + shape.ToString() + " wants " +
                    std::to_string(shape.dims[depth]));
      }
      return Status::Ok();
    };
    skip();
    if (s.substr(i).starts_with("{...}")) {
      return fail("the literal was elided ('{...}') when the text was printed");
    }
    STITCH_RETURN_IF_ERROR(list(0));
    skip();
    if (i != s.size()) return fail("unexpected text after the literal");
    if (static_cast<int64_t>(lit->size()) != expected && lit->size() != 1) {
      return fail("literal has " + std::to_string(lit->size()) + " elements, " + shape.ToString() +
                  " has " + std::to_string(expected));
    }
    return Status::Ok();
  }

  const HloModule& m_;
  const HloImportOptions& opt_;
  Graph g_;
  int depth_ = 0;
  int64_t next_param_ = 0;
  std::set<const HloComputation*> active_;
  std::string cur_name_, cur_source_;
};

Status CheckInScopeImpl(const HloModule& m, const HloInstruction& ins, const std::string& source,
                        int depth, std::set<const HloComputation*>* active) {
  const std::string where = Where(source, ins.line);
  if (depth > kMaxNesting) return InvalidArgument(where + ": fusions nested too deep");
  if (!IsSupportedOpcode(ins.opcode)) {
    return Unimplemented("unsupported op " + InsRef(ins, source));
  }
  STITCH_RETURN_IF_ERROR(CheckShapeSupported(ins.shape, where));
  for (const auto& o : ins.operands) {
    if (o.shape) STITCH_RETURN_IF_ERROR(CheckShapeSupported(*o.shape, where));
  }
  if (ins.opcode == "reduce") {
    auto it = ins.attrs.find("to_apply");
    const HloComputation* r = it == ins.attrs.end() ? nullptr : FindComputation(m, it->second);
    if (!r || ins.operands.empty() || !AnalyseReducer(*r, ins.operands.size() / 2)) {
      return Unimplemented(where + ": reduce '" + ins.name + "' has an unsupported reducer");
    }
  }
  if (ins.opcode == "fusion") {
    auto it = ins.attrs.find("calls");
    const HloComputation* c = it == ins.attrs.end() ? nullptr : FindComputation(m, it->second);
    if (!c)
      return InvalidArgument(where + ": fusion '" + ins.name + "' calls no known computation");
    if (active->count(c))
      return InvalidArgument(where + ": computation '" + c->name + "' calls itself");
    active->insert(c);
    for (const auto& inner : c->instructions) {
      Status st = CheckInScopeImpl(m, inner, source, depth + 1, active);
      if (!st.ok()) {
        active->erase(c);
        return st;
      }
    }
    active->erase(c);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Graph> LowerComputation(const HloModule& m, const HloComputation& comp,
                                 const std::string& graph_name, const HloImportOptions& options) {
  Lowerer l(m, options);
  return l.Run(comp, graph_name);
}

Status CheckInScope(const HloModule& m, const HloInstruction& ins, const std::string& source) {
  std::set<const HloComputation*> active;
  return CheckInScopeImpl(m, ins, source, 0, &active);
}

bool IsDataMovementOnly(std::string_view opcode) {
  return opcode == "parameter" || opcode == "constant" || opcode == "tuple" ||
         opcode == "get-tuple-element" || opcode == "reshape" || opcode == "bitcast" ||
         opcode == "copy" || opcode == "transpose" || opcode == "broadcast";
}

}  // namespace stitch::hlo
