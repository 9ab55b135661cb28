// Lowering of parsed HLO to the stitch IR: the driver. It walks computations operands-first,
// inlines fusions, flattens tuples, normalises layouts at the graph's edges, and lowers each
// instruction with the handler its opcode selects from one dispatch table. The handlers are
// in hlo_lower_*.cc.
#include "hlo_lower.h"

#include <algorithm>
#include <unordered_map>

#include "hlo_lowerer.h"
#include "stitch/ir/verifier.h"

namespace stitch::hlo {
namespace {

// Where the driver finds an instruction's result shape before it calls the handler.
enum class ResultShape {
  kReadByHandler,     // tuples, calls and multi-result ops read their HLO shapes themselves
  kWritten,           // the text must write it
  kLikeOperand0,      // written, or else that of operand 0
  kLikeOperand1,      // written, or else that of operand 1 (select's and clamp's operand 0
                      // may be a predicate or a scalar)
  kPredLikeOperand0,  // written, or else operand 0's dims with pred elements
};

// How to lower one HLO opcode.
struct OpLowering {
  OpHandler handler;
  ResultShape shape;
  std::optional<OpCode> op;  // the op list's op for this HLO opcode, if any
};

// An HLO opcode with a handler of its own.
struct NamedLowering {
  std::string_view hlo_opcode;
  OpHandler handler;
  ResultShape shape;
};

StatusOr<Value> LowerParameter(Lowerer& l, const Instr& in);
StatusOr<Value> LowerTuple(Lowerer& l, const Instr& in);
StatusOr<Value> LowerGetTupleElement(Lowerer& l, const Instr& in);
StatusOr<Value> LowerFusion(Lowerer& l, const Instr& in);

// The HLO ops that need more than their operands mapped to one IR op.
constexpr NamedLowering kNamedLowerings[] = {
    {"parameter", LowerParameter, ResultShape::kReadByHandler},
    {"tuple", LowerTuple, ResultShape::kReadByHandler},
    {"get-tuple-element", LowerGetTupleElement, ResultShape::kReadByHandler},
    {"fusion", LowerFusion, ResultShape::kReadByHandler},
    {"reduce", LowerReduce, ResultShape::kReadByHandler},
    {"batch-norm-training", LowerBatchNorm, ResultShape::kReadByHandler},
    {"batch-norm-grad", LowerBatchNorm, ResultShape::kReadByHandler},
    {"constant", LowerConstant, ResultShape::kWritten},
    {"iota", LowerIota, ResultShape::kWritten},
    {"compare", LowerCompare, ResultShape::kPredLikeOperand0},
    {"select", LowerSelectOrClamp, ResultShape::kLikeOperand1},
    {"clamp", LowerSelectOrClamp, ResultShape::kLikeOperand1},
    {"copy", LowerCopy, ResultShape::kLikeOperand0},
    {"broadcast", LowerBroadcast, ResultShape::kWritten},
    {"reshape", LowerReshape, ResultShape::kWritten},
    {"bitcast", LowerBitcast, ResultShape::kWritten},
    {"transpose", LowerTransposeOrReverse, ResultShape::kWritten},
    {"reverse", LowerTransposeOrReverse, ResultShape::kWritten},
    {"slice", LowerSlice, ResultShape::kWritten},
    {"concatenate", LowerConcatenate, ResultShape::kWritten},
    {"pad", LowerPad, ResultShape::kWritten},
};

// The HLO spelling of each op of the op list that has one.
struct HloSpelling {
  std::string_view hlo_opcode;
  OpCode op;
};

#define STITCH_OP(Enum, wire, Proto, name, hlo, ...) HloSpelling{hlo, OpCode::k##Enum},
constexpr HloSpelling kHloSpellings[] = {
#include "stitch/ir/op_list.h"
};

// Returns how the elementwise handler finds the result shape of `op` when it is omitted.
ResultShape ElementwiseResultShape(OpCode op) {
  switch (ResultDTypeOf(op)) {
    case ResultDType::kOperand:
      return ResultShape::kLikeOperand0;
    case ResultDType::kPred:
      return ResultShape::kPredLikeOperand0;
    case ResultDType::kDeclared:
      break;
  }
  return ResultShape::kWritten;
}

using LoweringTable = std::unordered_map<std::string_view, OpLowering>;

// Returns the lowering of every supported HLO opcode: the named handlers, then the generic
// elementwise one for each other elementwise op the op list gives an HLO spelling.
LoweringTable MakeLoweringTable() {
  std::unordered_map<std::string_view, OpCode> ops;
  for (const HloSpelling& s : kHloSpellings) {
    if (!s.hlo_opcode.empty()) ops.emplace(s.hlo_opcode, s.op);
  }
  LoweringTable table;
  for (const NamedLowering& named : kNamedLowerings) {
    auto op = ops.find(named.hlo_opcode);
    table[named.hlo_opcode] = {named.handler, named.shape,
                               op == ops.end() ? std::nullopt : std::optional(op->second)};
  }
  for (const auto& [hlo_opcode, op] : ops) {
    if (ClassOf(op) != OpClass::kElementwise) continue;
    table.emplace(hlo_opcode, OpLowering{LowerElementwise, ElementwiseResultShape(op), op});
  }
  return table;
}

// Returns how to lower HLO opcode `opcode`, or null when stitch does not support it.
const OpLowering* FindLowering(std::string_view opcode) {
  static const auto* table = new LoweringTable(MakeLoweringTable());
  auto it = table->find(opcode);
  return it == table->end() ? nullptr : &it->second;
}

std::string InsRef(const HloInstruction& ins, const std::string& source) {
  return "'" + ins.opcode + "' (instruction '" + ins.name + "') at " + Where(source, ins.line);
}

// Returns the declared shape, or, where `rule` allows, the one the operands imply when the
// text omits it.
StatusOr<Shape> ResultShapeOf(const Lowerer& l, const Instr& in, ResultShape rule) {
  if (!in.ins.shape.omitted) return l.ArrayShape(in.ins.shape, in.where);
  const size_t from = rule == ResultShape::kLikeOperand1 ? 1 : 0;
  if (rule == ResultShape::kWritten || in.operands.size() <= from || in.operands[from]->is_tuple ||
      in.operands[from]->node < 0) {
    return InvalidArgument(in.where + ": the shape of " + in.ins.opcode + " '" + in.ins.name +
                           "' is omitted and cannot be inferred; write it");
  }
  Shape s = l.ShapeOf(in.operands[from]->node);
  if (rule == ResultShape::kPredLikeOperand0) s.dtype = DType::kPred;
  return s;
}

// Inside a called computation, a parameter is the caller's operand; top-level parameters
// are made before any instruction is lowered.
StatusOr<Value> LowerParameter(Lowerer&, const Instr& in) {
  auto no = ParseInt(in.ins.args_text);
  if (!no || *no < 0) return in.Fail("expected a parameter number");
  if (!in.args) return in.Fail("unexpected parameter");
  if (*no >= static_cast<int64_t>(in.args->size())) {
    return in.Fail("parameter " + std::to_string(*no) + " but the caller passes " +
                   std::to_string(in.args->size()) + " operands");
  }
  return (*in.args)[*no];
}

StatusOr<Value> LowerTuple(Lowerer&, const Instr& in) {
  Value v;
  v.is_tuple = true;
  for (const Value* o : in.operands) v.elems.push_back(*o);
  return v;
}

StatusOr<Value> LowerGetTupleElement(Lowerer&, const Instr& in) {
  STITCH_RETURN_IF_ERROR(in.NeedOperands(1));
  const std::string* index = in.Attr("index");
  std::optional<int64_t> idx = index ? ParseInt(*index) : std::nullopt;
  if (!idx) return in.Fail("expected index=<n>");
  const Value& tuple = *in.operands[0];
  if (!tuple.is_tuple || *idx < 0 || *idx >= static_cast<int64_t>(tuple.elems.size())) {
    return in.Fail("index " + std::to_string(*idx) + " is out of range of '" +
                   in.operand_ins[0]->name + "'");
  }
  return tuple.elems[*idx];
}

// A fusion is inlined: its body is lowered on the fusion's operands.
StatusOr<Value> LowerFusion(Lowerer& l, const Instr& in) {
  const std::string* calls = in.Attr("calls");
  if (!calls) return in.Fail("missing attribute 'calls'");
  const HloComputation* callee = FindComputation(l.module(), *calls);
  if (!callee) return in.Fail("calls unknown computation '" + *calls + "'");
  std::vector<Value> call_args;
  for (const Value* o : in.operands) call_args.push_back(*o);
  STITCH_ASSIGN_OR_RETURN(Value r, l.LowerCall(*callee, call_args));
  // The fusion's own shape decides the layout of its result.
  if (!r.is_tuple && !in.ins.shape.is_tuple) {
    STITCH_ASSIGN_OR_RETURN(r.m2m, NormaliseLayout(in.ins.shape, in.where));
  }
  return r;
}

// Returns, for each instruction of `c`, the indices of its operands in `c`.
StatusOr<std::vector<std::vector<int>>> OperandIndices(const HloComputation& c,
                                                       const std::string& source) {
  const auto& ins = c.instructions;
  std::unordered_map<std::string, int> index;
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!index.emplace(ins[k].name, static_cast<int>(k)).second) {
      return InvalidArgument(Where(source, ins[k].line) + ": instruction name '" + ins[k].name +
                             "' is defined twice in '" + c.name + "'");
    }
  }
  std::vector<std::vector<int>> operands(ins.size());
  for (size_t k = 0; k < ins.size(); ++k) {
    for (const auto& o : ins[k].operands) {
      auto it = index.find(o.name);
      if (it == index.end()) {
        // parameter(0), iota() etc. carry no operand names; others must resolve.
        if (ins[k].opcode == "parameter") break;
        return InvalidArgument(Where(source, ins[k].line) + ": operand '" + o.name + "' of '" +
                               ins[k].name + "' is not defined in '" + c.name + "'");
      }
      operands[k].push_back(it->second);
    }
  }
  return operands;
}

// Returns the instructions the root of `c` depends on, operands first. An explicit stack
// keeps long instruction chains off the call stack.
StatusOr<std::vector<int>> PostOrderFromRoot(const HloComputation& c,
                                             const std::vector<std::vector<int>>& operands,
                                             const std::string& source) {
  std::vector<int> order;
  std::vector<uint8_t> state(c.instructions.size(), 0);  // 0 new, 1 on stack, 2 done
  std::vector<std::pair<int, size_t>> stack = {{c.root, 0}};
  state[c.root] = 1;
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < operands[n].size()) {
      int o = operands[n][next++];
      if (state[o] == 1) {
        return InvalidArgument(Where(source, c.instructions[o].line) + ": instruction '" +
                               c.instructions[o].name + "' depends on itself");
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
  return order;
}

Status CheckInScopeImpl(const HloModule& m, const HloInstruction& ins, const std::string& source,
                        int depth, std::set<const HloComputation*>* active) {
  const std::string where = Where(source, ins.line);
  if (depth > kMaxNesting) return InvalidArgument(where + ": fusions nested too deep");
  if (!FindLowering(ins.opcode)) {
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

StatusOr<Graph> Lowerer::Run(const HloComputation& comp, const std::string& graph_name) {
  g_.name = graph_name;
  STITCH_ASSIGN_OR_RETURN(Value root, LowerComp(comp, nullptr));
  const HloInstruction& root_ins = comp.instructions[comp.root];
  STITCH_RETURN_IF_ERROR(
      AddOutputs(root, &root_ins.shape, Where(opt_.source_name, root_ins.line), root_ins, 0));
  if (g_.outputs.empty()) {
    return InvalidArgument(Where(opt_.source_name, root_ins.line) + ": entry root '" +
                           root_ins.name + "' has no array outputs");
  }
  Graph pruned = WithoutDeadNodes(std::move(g_));
  if (static_cast<int64_t>(pruned.nodes.size()) > opt_.limits.max_nodes) {
    return ResourceExhausted(opt_.source_name + ": graph '" + graph_name + "' has " +
                             std::to_string(pruned.nodes.size()) + " nodes, over the limit of " +
                             std::to_string(opt_.limits.max_nodes) + " (max_graph_nodes)");
  }
  Status st = Verify(pruned, opt_.limits);
  if (!st.ok()) return st.WithContext(opt_.source_name + ": graph '" + graph_name + "'");
  return pruned;
}

Status Lowerer::CheckBudget() const {
  int64_t cap = opt_.limits.max_nodes * 2 + 1000;
  if (static_cast<int64_t>(g_.nodes.size()) > cap) {
    return ResourceExhausted(opt_.source_name + ": module '" + m_.name + "' expands to more than " +
                             std::to_string(cap) +
                             " nodes (fusions inlined), over the limit of twice max_graph_nodes "
                             "plus 1000");
  }
  return Status::Ok();
}

void Lowerer::SetCursor(const HloInstruction& ins) {
  cur_name_ = ins.name;
  cur_source_ = Where(opt_.source_name, ins.line);
}

// Outputs whose declared layout is not the default are transposed into it: the caller reads
// the buffer physically.
Status Lowerer::AddOutputs(const Value& v, const HloShape* declared, const std::string& where,
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

StatusOr<Value> Lowerer::LowerComp(const HloComputation& c, const std::vector<Value>* args) {
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

StatusOr<Value> Lowerer::LowerCompBody(const HloComputation& c, const std::vector<Value>* args) {
  const auto& ins = c.instructions;
  STITCH_ASSIGN_OR_RETURN(auto operands, OperandIndices(c, opt_.source_name));
  STITCH_ASSIGN_OR_RETURN(std::vector<int> order, PostOrderFromRoot(c, operands, opt_.source_name));
  std::vector<Value> vals(ins.size());
  std::vector<bool> made(ins.size(), false);
  if (!args) STITCH_RETURN_IF_ERROR(MakeTopLevelParameters(c, &vals, &made));
  for (int k : order) {
    if (made[k]) continue;
    STITCH_RETURN_IF_ERROR(CheckBudget());
    std::vector<const Value*> ov;
    std::vector<const HloInstruction*> oi;
    for (int o : operands[k]) {
      ov.push_back(&vals[o]);
      oi.push_back(&ins[o]);
    }
    SetCursor(ins[k]);
    STITCH_ASSIGN_OR_RETURN(vals[k], LowerInstr(ins[k], std::move(ov), std::move(oi), args));
  }
  return vals[c.root];
}

// At the top level every parameter is part of the signature, live or not, so all are made
// first, in parameter-number order.
Status Lowerer::MakeTopLevelParameters(const HloComputation& c, std::vector<Value>* vals,
                                       std::vector<bool>* made) {
  const auto& ins = c.instructions;
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
    const HloInstruction& pi = ins[params[p].second];
    const std::string where = Where(opt_.source_name, pi.line);
    if (params[p].first != static_cast<int64_t>(p)) {
      return InvalidArgument(where + ": parameter numbers of '" + c.name +
                             "' are not 0..n-1 (missing or repeated " + std::to_string(p) + ")");
    }
    SetCursor(pi);
    STITCH_ASSIGN_OR_RETURN((*vals)[params[p].second], MakeParameter(pi.shape, where, 0));
    (*made)[params[p].second] = true;
  }
  return Status::Ok();
}

StatusOr<Value> Lowerer::MakeParameter(const HloShape& s, const std::string& where, int depth) {
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
  if (m2m.empty()) {
    v.node = Add(std::move(n));
    return v;
  }
  // The buffer holds the value in layout order: read it as such, then restore the logical
  // order with a transpose.
  auto major = MajorToMinor(m2m);
  n.shape.dims.clear();
  for (int64_t d : major) n.shape.dims.push_back(shape.dims[d]);
  int p = Add(std::move(n));
  v.node = Transpose(p, InversePermutation(major), ".logical");
  v.m2m = m2m;
  return v;
}

StatusOr<Value> Lowerer::LowerInstr(const HloInstruction& ins, std::vector<const Value*> operands,
                                    std::vector<const HloInstruction*> operand_ins,
                                    const std::vector<Value>* args) {
  const std::string where = Where(opt_.source_name, ins.line);
  const OpLowering* lowering = FindLowering(ins.opcode);
  if (!lowering) {
    return Unimplemented("unsupported op '" + ins.opcode + "' (instruction '" + ins.name +
                         "') at " + where);
  }
  Instr in{ins, lowering->op, std::move(operands), std::move(operand_ins), args, where, {}, {}};
  if (lowering->shape != ResultShape::kReadByHandler) {
    STITCH_ASSIGN_OR_RETURN(in.shape, ResultShapeOf(*this, in, lowering->shape));
    STITCH_ASSIGN_OR_RETURN(in.m2m, NormaliseLayout(ins.shape, where));
  }
  return lowering->handler(*this, in);
}

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
