// The verifier. It runs on untrusted input, so every check reads only what earlier checks
// have proven valid, and arithmetic on dimensions is overflow-checked.
#include "stitch/ir/verifier.h"

#include <algorithm>
#include <set>
#include <string>

namespace stitch {
namespace {

// Names come from the request and are echoed into messages and logs, so a long one is cut.
constexpr size_t kMaxNameInMessage = 80;

std::string NodeRef(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  std::string s = "node " + std::to_string(i);
  if (!n.name.empty()) {
    s += " '" + n.name.substr(0, kMaxNameInMessage) +
         (n.name.size() > kMaxNameInMessage ? "...'" : "'");
  }
  s += " (" + std::string(OpCodeName(n.op)) + ")";
  if (!n.source.empty()) s += " at " + n.source;
  return s;
}

std::string Dims(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

bool KnownDType(DType t) { return DTypeBytes(t) != 0; }

// Every limit's message says "over the limit of <value> (<name>)", the name being the
// GraphLimits field's key in stitchd's configuration, so that an operator can find the knob.
constexpr const char* kOverTheLimit = "over the limit of ";

// Checks dtype, rank and dims of a declared shape; returns the rule broken or "".
std::string CheckShape(const Shape& s, const GraphLimits& limits) {
  if (!KnownDType(s.dtype)) {
    return "unknown dtype " + std::to_string(static_cast<int>(s.dtype));
  }
  if (s.rank() > limits.max_rank) {
    return "rank " + std::to_string(s.rank()) + " is " + kOverTheLimit +
           std::to_string(limits.max_rank) + " (max_tensor_rank)";
  }
  int64_t n = 1;
  for (int64_t d : s.dims) {
    if (d < 0) return "negative dimension in " + Dims(s.dims);
    if (__builtin_mul_overflow(n, d, &n)) {
      return "element count of " + Dims(s.dims) + " overflows 64 bits";
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, int64_t{DTypeBytes(s.dtype)}, &bytes)) {
    return "byte size of " + Dims(s.dims) + " overflows 64 bits";
  }
  if (n > limits.max_elements_per_tensor) {
    return s.ToString() + " has " + std::to_string(n) + " elements, " + kOverTheLimit +
           std::to_string(limits.max_elements_per_tensor) + " (max_tensor_elements)";
  }
  return "";
}

Status Rule(const Graph& g, int i, const std::string& rule) {
  return InvalidArgument(NodeRef(g, i) + ": " + rule);
}

bool IsPermutation(const std::vector<int64_t>& p, int rank) {
  if (static_cast<int>(p.size()) != rank) return false;
  std::vector<bool> seen(rank, false);
  for (int64_t v : p) {
    if (v < 0 || v >= rank || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

StatusOr<Shape> InferElementwise(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  const Shape& a = g.nodes[n.operands[0]].shape;
  for (size_t k = 1; k < n.operands.size(); ++k) {
    const Shape& b = g.nodes[n.operands[k]].shape;
    if (b.dims != a.dims) {
      return Rule(g, i,
                  "operand " + std::to_string(k) + " has dims " + Dims(b.dims) +
                      " but operand 0 has " + Dims(a.dims) + " (no implicit broadcast)");
    }
  }
  if (n.op == OpCode::kSelect) {
    if (a.dtype != DType::kPred) return Rule(g, i, "select's predicate must be pred");
    const Shape& t = g.nodes[n.operands[1]].shape;
    if (g.nodes[n.operands[2]].shape.dtype != t.dtype) {
      return Rule(g, i, "select's branches have different dtypes");
    }
    return t;
  }
  for (size_t k = 1; k < n.operands.size(); ++k) {
    if (g.nodes[n.operands[k]].shape.dtype != a.dtype) {
      return Rule(g, i,
                  "operands have different dtypes " + std::string(DTypeName(a.dtype)) + " and " +
                      std::string(DTypeName(g.nodes[n.operands[k]].shape.dtype)));
    }
  }
  const OperandDTypes accepted = OperandDTypesOf(n.op);
  if (accepted == OperandDTypes::kFloat && !IsFloat(a.dtype)) {
    return Rule(g, i, "needs a floating-point operand, got " + std::string(DTypeName(a.dtype)));
  }
  if (accepted == OperandDTypes::kInteger && IsFloat(a.dtype)) {
    return Rule(g, i, "needs an integer or pred operand, got " + std::string(DTypeName(a.dtype)));
  }
  if (n.op == OpCode::kBitcastConvert &&
      (DTypeBytes(n.shape.dtype) != DTypeBytes(a.dtype) || n.shape.dtype == DType::kPred ||
       a.dtype == DType::kPred)) {
    return Rule(g, i, "bitcast-convert between dtypes of different widths");
  }
  switch (ResultDTypeOf(n.op)) {
    case ResultDType::kPred:
      return Shape{DType::kPred, a.dims};
    case ResultDType::kDeclared:
      return Shape{n.shape.dtype, a.dims};
    case ResultDType::kOperand:
      break;
  }
  return a;
}

StatusOr<Shape> InferBroadcast(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  const Shape& in = g.nodes[n.operands[0]].shape;
  if (static_cast<int>(n.dimensions.size()) != in.rank()) {
    return Rule(g, i,
                "broadcast map has " + std::to_string(n.dimensions.size()) +
                    " entries for an operand of rank " + std::to_string(in.rank()));
  }
  for (size_t k = 0; k < n.dimensions.size(); ++k) {
    int64_t d = n.dimensions[k];
    if (d < 0 || d >= n.shape.rank()) {
      return Rule(g, i, "broadcast map entry " + std::to_string(d) + " is out of range");
    }
    if (k > 0 && d <= n.dimensions[k - 1]) {
      return Rule(g, i, "broadcast map " + Dims(n.dimensions) + " is not strictly increasing");
    }
    if (n.shape.dims[d] != in.dims[k]) {
      return Rule(g, i,
                  "broadcast maps operand dim " + std::to_string(k) + " (size " +
                      std::to_string(in.dims[k]) + ") to output dim " + std::to_string(d) +
                      " (size " + std::to_string(n.shape.dims[d]) + ")");
    }
  }
  return Shape{in.dtype, n.shape.dims};
}

StatusOr<Shape> InferSlice(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  const Shape& in = g.nodes[n.operands[0]].shape;
  size_t r = in.dims.size();
  if (n.slice_starts.size() != r || n.slice_limits.size() != r || n.slice_strides.size() != r) {
    return Rule(g, i, "slice needs start/limit/stride for each of " + std::to_string(r) + " dims");
  }
  Shape out{in.dtype, {}};
  for (size_t d = 0; d < r; ++d) {
    int64_t s = n.slice_starts[d], l = n.slice_limits[d], st = n.slice_strides[d];
    if (st < 1 || s < 0 || s > l || l > in.dims[d]) {
      return Rule(g, i,
                  "slice [" + std::to_string(s) + ":" + std::to_string(l) + ":" +
                      std::to_string(st) + "] is out of bounds for dim " + std::to_string(d) +
                      " of size " + std::to_string(in.dims[d]));
    }
    out.dims.push_back((l - s + st - 1) / st);
  }
  return out;
}

StatusOr<Shape> InferConcat(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  const Shape& first = g.nodes[n.operands[0]].shape;
  if (n.dimensions.size() != 1 || n.dimensions[0] < 0 || n.dimensions[0] >= first.rank()) {
    return Rule(g, i, "concatenate needs one dimension within the operands' rank");
  }
  int64_t d = n.dimensions[0];
  Shape out = first;
  out.dims[d] = 0;
  for (int o : n.operands) {
    const Shape& s = g.nodes[o].shape;
    if (s.dtype != first.dtype || s.rank() != first.rank()) {
      return Rule(g, i, "concatenate operands differ in dtype or rank");
    }
    for (int k = 0; k < s.rank(); ++k) {
      if (k != d && s.dims[k] != first.dims[k]) {
        return Rule(g, i, "concatenate operands differ in dim " + std::to_string(k));
      }
    }
    if (__builtin_add_overflow(out.dims[d], s.dims[d], &out.dims[d])) {
      return Rule(g, i, "concatenated size overflows");
    }
  }
  return out;
}

StatusOr<Shape> InferPad(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  const Shape& in = g.nodes[n.operands[0]].shape;
  const Shape& value = g.nodes[n.operands[1]].shape;
  if (value.rank() != 0 || value.dtype != in.dtype) {
    return Rule(g, i, "pad value must be a scalar of the operand's dtype");
  }
  size_t r = in.dims.size();
  if (n.pad_low.size() != r || n.pad_high.size() != r || n.pad_interior.size() != r) {
    return Rule(g, i, "pad needs low/high/interior for each of " + std::to_string(r) + " dims");
  }
  Shape out{in.dtype, {}};
  for (size_t d = 0; d < r; ++d) {
    int64_t lo = n.pad_low[d], hi = n.pad_high[d], in_ = n.pad_interior[d], size = in.dims[d];
    const int64_t kMax = int64_t{1} << 40;
    if (in_ < 0 || in_ > kMax || lo < -kMax || lo > kMax || hi < -kMax || hi > kMax) {
      return Rule(g, i, "pad amounts for dim " + std::to_string(d) + " are out of range");
    }
    int64_t o = lo + hi + size + std::max<int64_t>(size - 1, 0) * in_;
    if (o < 0) return Rule(g, i, "pad gives a negative size for dim " + std::to_string(d));
    out.dims.push_back(o);
  }
  return out;
}

StatusOr<Shape> InferReduce(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  const Shape& in = g.nodes[n.operands[0]].shape;
  const Shape& init = g.nodes[n.operands[1]].shape;
  if (init.rank() != 0 || init.dtype != in.dtype) {
    return Rule(g, i, "reduce init must be a scalar of the input's dtype");
  }
  if (ReduceKindName(n.reduce_kind) == "invalid-reduce") {
    return Rule(g, i, "unknown reduce combiner " + std::to_string(static_cast<int>(n.reduce_kind)));
  }
  bool logical = n.reduce_kind == ReduceKind::kAnd || n.reduce_kind == ReduceKind::kOr;
  if (logical && IsFloat(in.dtype)) return Rule(g, i, "and/or reduce of a float input");
  std::vector<bool> reduced(in.rank(), false);
  for (size_t k = 0; k < n.dimensions.size(); ++k) {
    int64_t d = n.dimensions[k];
    if (d < 0 || d >= in.rank()) {
      return Rule(g, i, "reduce dimension " + std::to_string(d) + " is out of range");
    }
    if (k > 0 && d <= n.dimensions[k - 1]) {
      return Rule(g, i, "reduce dimensions " + Dims(n.dimensions) + " are not sorted and unique");
    }
    reduced[d] = true;
  }
  Shape out{in.dtype, {}};
  for (int d = 0; d < in.rank(); ++d) {
    if (!reduced[d]) out.dims.push_back(in.dims[d]);
  }
  return out;
}

StatusOr<Shape> InferLeaf(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  if (n.op == OpCode::kParameter) {
    if (n.parameter_number < 0) return Rule(g, i, "parameter number is negative");
    return n.shape;
  }
  if (n.op == OpCode::kIota) {
    if (n.dimensions.size() != 1 || n.dimensions[0] < 0 || n.dimensions[0] >= n.shape.rank()) {
      return Rule(g, i, "iota needs one dimension within its rank");
    }
    return n.shape;
  }
  // Constant.
  bool is_float = IsFloat(n.shape.dtype);
  const size_t count = is_float ? n.literal.f.size() : n.literal.i.size();
  const size_t other = is_float ? n.literal.i.size() : n.literal.f.size();
  if (other != 0) return Rule(g, i, "literal holds values of the wrong kind for its dtype");
  if (count != 1 && static_cast<int64_t>(count) != n.shape.elements()) {
    return Rule(g, i,
                "literal has " + std::to_string(count) + " values for " +
                    std::to_string(n.shape.elements()) + " elements");
  }
  return n.shape;
}

}  // namespace

StatusOr<Shape> InferShape(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  switch (ClassOf(n.op)) {
    case OpClass::kLeaf:
      return InferLeaf(g, i);
    case OpClass::kElementwise:
      return InferElementwise(g, i);
    case OpClass::kReduce:
      return InferReduce(g, i);
    case OpClass::kRng: {
      const Shape& seed = g.nodes[n.operands[0]].shape;
      if (seed.rank() != 0 || seed.dtype != DType::kU64) {
        return Rule(g, i, "rng seed must be a u64 scalar");
      }
      if (!IsFloat(n.shape.dtype)) return Rule(g, i, "rng-uniform must produce a float dtype");
      return n.shape;
    }
    case OpClass::kDataMovement:
      break;
  }
  const Shape& in = g.nodes[n.operands[0]].shape;
  switch (n.op) {
    case OpCode::kBroadcast:
      return InferBroadcast(g, i);
    case OpCode::kReshape:
      if (n.shape.elements() != in.elements()) {
        return Rule(g, i,
                    "reshape from " + Dims(in.dims) + " to " + Dims(n.shape.dims) +
                        " changes the element count");
      }
      return Shape{in.dtype, n.shape.dims};
    case OpCode::kTranspose: {
      if (!IsPermutation(n.dimensions, in.rank())) {
        return Rule(g, i,
                    "transpose dimensions " + Dims(n.dimensions) +
                        " are not a permutation of rank " + std::to_string(in.rank()));
      }
      Shape out{in.dtype, {}};
      for (int64_t p : n.dimensions) out.dims.push_back(in.dims[p]);
      return out;
    }
    case OpCode::kSlice:
      return InferSlice(g, i);
    case OpCode::kConcatenate:
      return InferConcat(g, i);
    case OpCode::kPad:
      return InferPad(g, i);
    case OpCode::kReverse: {
      std::set<int64_t> seen;
      for (int64_t d : n.dimensions) {
        if (d < 0 || d >= in.rank() || !seen.insert(d).second) {
          return Rule(g, i, "reverse dimensions " + Dims(n.dimensions) + " are invalid");
        }
      }
      return in;
    }
    default:
      return Rule(g, i, "unknown op");
  }
}

namespace {

// Local checks: those that need only the node itself and its operands' existence.
Status CheckNodeLocally(const Graph& g, int i, const GraphLimits& limits) {
  const Node& n = g.nodes[i];
  if (!IsKnownOpCode(n.op)) {
    return InvalidArgument("node " + std::to_string(i) + " '" + n.name + "': unknown op code " +
                           std::to_string(static_cast<int>(n.op)));
  }
  std::string shape_error = CheckShape(n.shape, limits);
  if (!shape_error.empty()) {
    Status s = Rule(g, i, shape_error);
    bool over_limit = shape_error.find(kOverTheLimit) != std::string::npos;
    return over_limit ? ResourceExhausted(s.message()) : s;
  }
  int arity = Arity(n.op);
  int count = static_cast<int>(n.operands.size());
  if (arity >= 0 ? count != arity : count < 1) {
    return Rule(g, i,
                "takes " + (arity >= 0 ? std::to_string(arity) : "at least 1") +
                    " operand(s), got " + std::to_string(count));
  }
  for (int o : n.operands) {
    if (o < 0 || o >= static_cast<int>(g.nodes.size())) {
      return Rule(g, i,
                  "dangling operand " + std::to_string(o) + " (graph has " +
                      std::to_string(g.nodes.size()) + " nodes)");
    }
  }
  return Status::Ok();
}

Status CheckAcyclic(const Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<uint8_t> color(n, 0);
  std::vector<std::pair<int, size_t>> stack;
  for (int root = 0; root < n; ++root) {
    if (color[root]) continue;
    stack.push_back({root, 0});
    color[root] = 1;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const auto& ops = g.nodes[node].operands;
      if (next < ops.size()) {
        int o = ops[next++];
        if (color[o] == 1) {
          return Rule(g, o,
                      "is part of a cycle (reached again from node " + std::to_string(node) + ")");
        }
        if (color[o] == 0) {
          color[o] = 1;
          stack.push_back({o, 0});
        }
        continue;
      }
      color[node] = 2;
      stack.pop_back();
    }
  }
  return Status::Ok();
}

Status CheckParameters(const Graph& g) {
  std::vector<int> params = g.Parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    if (g.nodes[params[k]].parameter_number != static_cast<int64_t>(k)) {
      return Rule(g, params[k],
                  "parameter numbers must be 0.." + std::to_string(params.size() - 1) +
                      " without gaps or repeats");
    }
  }
  std::vector<bool> named(params.size(), false);
  for (int64_t p : g.outer_parameters) {
    if (p < 0 || p >= static_cast<int64_t>(params.size())) {
      return InvalidArgument("outer parameter " + std::to_string(p) + " is not a parameter (" +
                             std::to_string(params.size()) + " parameters)");
    }
    if (named[p]) {
      return InvalidArgument("outer parameter " + std::to_string(p) + " is named twice");
    }
    named[p] = true;
    const Shape& shape = g.nodes[params[p]].shape;
    if (shape.rank() == 0 || shape.dims[0] < 1) {
      return Rule(g, params[p], "an outer parameter needs a nonempty dimension 0 to vary");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Verify(const Graph& g, const GraphLimits& limits) {
  if (static_cast<int64_t>(g.nodes.size()) > limits.max_nodes) {
    return ResourceExhausted("graph has " + std::to_string(g.nodes.size()) + " nodes, " +
                             kOverTheLimit + std::to_string(limits.max_nodes) +
                             " (max_graph_nodes)");
  }
  // Outputs may repeat nodes, so only this bounds their list (and the kernels' arguments).
  if (static_cast<int64_t>(g.outputs.size()) > limits.max_nodes) {
    return ResourceExhausted("graph has " + std::to_string(g.outputs.size()) + " outputs, " +
                             kOverTheLimit + std::to_string(limits.max_nodes) +
                             " (max_graph_nodes)");
  }
  if (g.nodes.empty()) return InvalidArgument("graph has no nodes");
  if (g.outputs.empty()) return InvalidArgument("graph has no outputs");
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    int o = g.outputs[k];
    if (o < 0 || o >= static_cast<int>(g.nodes.size())) {
      return InvalidArgument("output " + std::to_string(k) + " refers to missing node " +
                             std::to_string(o));
    }
  }
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    STITCH_RETURN_IF_ERROR(CheckNodeLocally(g, i, limits));
  }
  STITCH_RETURN_IF_ERROR(CheckAcyclic(g));
  STITCH_RETURN_IF_ERROR(CheckParameters(g));
  for (int i : TopologicalOrder(g)) {
    StatusOr<Shape> inferred = InferShape(g, i);
    if (!inferred.ok()) return inferred.status();
    if (*inferred != g.nodes[i].shape) {
      return Rule(g, i,
                  "declared shape " + g.nodes[i].shape.ToString() + " differs from the inferred " +
                      inferred->ToString());
    }
  }
  return Status::Ok();
}

}  // namespace stitch
