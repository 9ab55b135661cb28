// The reference interpreter (interpreter.h), following SEMANTICS.md op by op.
//
// Precision: every float is held in double, whatever the node's dtype. Values of f16, bf16
// and f32 nodes are deliberately NOT rounded to their dtype after each op; only `convert`,
// `bitcast-convert`, `iota` and `rng-uniform` (which SEMANTICS.md defines through a
// conversion) round. The interpreter is thus a higher-precision oracle, and kernels, which
// compute f16/bf16 in f32 and round on store, agree with it within dtype tolerances.
//
// Integers are held as int64 normalised to their dtype (sign-extended for signed, zero-
// extended for unsigned, u64 by bit pattern, pred 0/1); arithmetic is done on uint64 (no
// signed overflow) and wrapped back to the dtype's width after every op.
//
// This file holds the driver, the leaves and reduce; interpreter_elementwise.cc and
// interpreter_data_movement.cc hold the other ops.
#include "stitch/reference/interpreter.h"

#include <algorithm>
#include <string>

#include "interpreter_internal.h"
#include "numeric.h"
#include "stitch/ir/philox.h"

namespace stitch {
namespace interp {

Status NodeError(const Graph& g, int id, const std::string& why) {
  return InvalidArgument("node " + std::to_string(id) + " '" + g.nodes[id].name + "': " + why);
}

Status NotDefined(const Graph& g, int id, DType t) {
  return NodeError(
      g, id,
      std::string(OpCodeName(g.nodes[id].op)) + " is not defined for " + std::string(DTypeName(t)));
}

Status NotHandled(const Graph& g, int id) {
  return NodeError(g, id, "op " + std::string(OpCodeName(g.nodes[id].op)) + " is not handled");
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

}  // namespace interp

namespace {

using internal::FloatToInt;
using internal::IntToFloat;
using internal::WrapInt;
using interp::FMax;
using interp::FMin;
using interp::ForEachAffine;
using interp::IntLess;
using interp::NodeError;
using interp::NotDefined;
using interp::RowMajorStrides;

// ---------------------------------------------------------------------------------------
// Leaves.

StatusOr<Tensor> EvalConstant(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  const Literal& lit = n.literal;
  const int64_t count = n.shape.elements();
  const int64_t size = static_cast<int64_t>(lit.size());
  if (size != 1 && size != count) {
    return NodeError(g, id,
                     "literal has " + std::to_string(size) + " values for " + n.shape.ToString());
  }
  Tensor out = Tensor::Zeros(n.shape);
  const DType t = n.shape.dtype;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t src = size == 1 ? 0 : k;
    if (IsFloat(t)) {
      out.f[k] = !lit.f.empty() ? lit.f[src] : static_cast<double>(lit.i[src]);
    } else if (t == DType::kPred) {
      out.i[k] = !lit.i.empty() ? lit.i[src] != 0 : lit.f[src] != 0.0;
    } else {
      out.i[k] = WrapInt(!lit.i.empty() ? lit.i[src] : FloatToInt(lit.f[src], t), t);
    }
  }
  return out;
}

StatusOr<Tensor> EvalIota(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.dimensions.size() != 1 || n.dimensions[0] < 0 || n.dimensions[0] >= n.shape.rank()) {
    return NodeError(g, id, "iota needs one dimension within the rank");
  }
  const int dim = static_cast<int>(n.dimensions[0]);
  const int64_t stride = RowMajorStrides(n.shape.dims)[dim];
  const int64_t extent = n.shape.dims[dim];
  Tensor out = Tensor::Zeros(n.shape);
  const DType t = n.shape.dtype;
  for (int64_t k = 0; k < out.size(); ++k) {
    const int64_t index = (k / stride) % extent;
    if (IsFloat(t)) {
      out.f[k] = IntToFloat(index, DType::kS64, t);
    } else {
      out.i[k] = WrapInt(index, t);
    }
  }
  return out;
}

StatusOr<Tensor> EvalRng(const Graph& g, int id, const Tensor& seed_tensor) {
  const Node& n = g.nodes[id];
  if (!IsFloat(n.shape.dtype)) return NotDefined(g, id, n.shape.dtype);
  if (seed_tensor.i.size() != 1) return NodeError(g, id, "rng seed must be an integer scalar");
  const auto seed = static_cast<uint64_t>(seed_tensor.i[0]);
  Tensor out = Tensor::Zeros(n.shape);
  for (int64_t k = 0; k < out.size(); ++k) {
    out.f[k] =
        RoundToDType(RngUniformValue(seed, static_cast<uint64_t>(k), n.rng_stream), n.shape.dtype);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Reduce.

StatusOr<Tensor> EvalReduce(const Graph& g, int id, const Tensor& in, const Tensor& init) {
  const Node& n = g.nodes[id];
  const DType t = in.shape.dtype;
  // step[d]: how far the output offset moves along input dim d (0 for reduced dims).
  std::vector<int64_t> step(in.shape.rank(), 0);
  const std::vector<int64_t> out_strides = RowMajorStrides(n.shape.dims);
  for (int d = 0, kept = 0; d < in.shape.rank(); ++d) {
    if (std::find(n.dimensions.begin(), n.dimensions.end(), d) == n.dimensions.end()) {
      if (kept >= n.shape.rank()) return NodeError(g, id, "reduce result rank mismatch");
      step[d] = out_strides[kept++];
    }
  }
  const int64_t out_count = n.shape.elements();
  const ReduceKind kind = n.reduce_kind;
  Tensor out = Tensor::Zeros(n.shape);
  if (IsFloat(t)) {
    // Sums and products accumulate in long double; the result is rounded to double once.
    std::vector<long double> acc(out_count, init.f[0]);
    switch (kind) {
      case ReduceKind::kSum:
        ForEachAffine(in.shape.dims, 0, step, [&](int64_t k, int64_t o) { acc[o] += in.f[k]; });
        break;
      case ReduceKind::kProd:
        ForEachAffine(in.shape.dims, 0, step, [&](int64_t k, int64_t o) { acc[o] *= in.f[k]; });
        break;
      case ReduceKind::kMax:
        ForEachAffine(in.shape.dims, 0, step, [&](int64_t k, int64_t o) {
          acc[o] = FMax(static_cast<double>(acc[o]), in.f[k]);
        });
        break;
      case ReduceKind::kMin:
        ForEachAffine(in.shape.dims, 0, step, [&](int64_t k, int64_t o) {
          acc[o] = FMin(static_cast<double>(acc[o]), in.f[k]);
        });
        break;
      default:
        return NodeError(g, id,
                         "reduce " + std::string(ReduceKindName(kind)) + " is not defined for " +
                             std::string(DTypeName(t)));
    }
    for (int64_t o = 0; o < out_count; ++o) out.f[o] = static_cast<double>(acc[o]);
    return out;
  }
  // Integers: sums and products wrap, so accumulating modulo 2^64 and wrapping once at the
  // end equals wrapping after every step.
  const bool is_unsigned = IsUnsignedInt(t);
  std::vector<int64_t> acc(out_count, init.i[0]);
  auto reduce = [&](auto combine) {
    ForEachAffine(in.shape.dims, 0, step,
                  [&](int64_t k, int64_t o) { acc[o] = combine(acc[o], in.i[k]); });
  };
  switch (kind) {
    case ReduceKind::kSum:
      reduce([](int64_t u, int64_t v) {
        return static_cast<int64_t>(static_cast<uint64_t>(u) + static_cast<uint64_t>(v));
      });
      break;
    case ReduceKind::kProd:
      reduce([](int64_t u, int64_t v) {
        return static_cast<int64_t>(static_cast<uint64_t>(u) * static_cast<uint64_t>(v));
      });
      break;
    case ReduceKind::kMax:
      reduce([&](int64_t u, int64_t v) { return IntLess(u, v, is_unsigned) ? v : u; });
      break;
    case ReduceKind::kMin:
      reduce([&](int64_t u, int64_t v) { return IntLess(u, v, is_unsigned) ? u : v; });
      break;
    case ReduceKind::kAnd:
      reduce([](int64_t u, int64_t v) { return u & v; });
      break;
    case ReduceKind::kOr:
      reduce([](int64_t u, int64_t v) { return u | v; });
      break;
  }
  for (int64_t o = 0; o < out_count; ++o) out.i[o] = WrapInt(acc[o], t);
  return out;
}

// ---------------------------------------------------------------------------------------

// Guards that keep a malformed graph from indexing out of bounds: operand counts, dtypes
// and elementwise sizes. The verifier enforces these (and much more); they are repeated here
// because they are cheap and an oracle must not crash.
Status CheckOperands(const Graph& g, int id, const std::vector<const Tensor*>& ins) {
  const Node& n = g.nodes[id];
  const int arity = Arity(n.op);
  if ((arity >= 0 && static_cast<int>(ins.size()) != arity) || (arity < 0 && ins.empty())) {
    return NodeError(g, id, "wrong number of operands");
  }
  const DType out = n.shape.dtype;
  auto all_are = [&](size_t first, DType t) {
    for (size_t k = first; k < ins.size(); ++k) {
      if (ins[k]->shape.dtype != t) return false;
    }
    return true;
  };
  bool dtypes_ok = true;
  switch (ClassOf(n.op)) {
    case OpClass::kElementwise:
      for (const Tensor* in : ins) {
        if (in->size() != n.shape.elements()) {
          return NodeError(g, id, "operand element count mismatch");
        }
      }
      if (n.op == OpCode::kSelect) {
        dtypes_ok = ins[0]->shape.dtype == DType::kPred && all_are(1, out);
      } else if (ResultDTypeOf(n.op) == ResultDType::kPred) {
        dtypes_ok = out == DType::kPred && all_are(0, ins[0]->shape.dtype);
      } else if (ResultDTypeOf(n.op) == ResultDType::kOperand) {
        dtypes_ok = all_are(0, out);
      }
      break;
    case OpClass::kDataMovement:
    case OpClass::kReduce:
      dtypes_ok = all_are(0, out);
      if ((n.op == OpCode::kPad || n.op == OpCode::kReduce) && ins[1]->size() != 1) {
        return NodeError(g, id, "operand 1 must be a scalar");
      }
      break;
    case OpClass::kLeaf:
    case OpClass::kRng:
      break;
  }
  if (!dtypes_ok) return NodeError(g, id, "operand dtypes do not match the op");
  return Status::Ok();
}

StatusOr<Tensor> EvalNode(const Graph& g, int id, const std::vector<Tensor>& values) {
  const Node& n = g.nodes[id];
  std::vector<const Tensor*> ins;
  ins.reserve(n.operands.size());
  for (int o : n.operands) ins.push_back(&values[o]);
  STITCH_RETURN_IF_ERROR(CheckOperands(g, id, ins));
  switch (ClassOf(n.op)) {
    case OpClass::kElementwise:
      return interp::EvalElementwise(g, id, ins);
    case OpClass::kDataMovement:
      return interp::EvalDataMovement(g, id, ins);
    case OpClass::kReduce:
      return EvalReduce(g, id, *ins[0], *ins[1]);
    case OpClass::kRng:
      return EvalRng(g, id, *ins[0]);
    case OpClass::kLeaf:
      if (n.op == OpCode::kConstant) return EvalConstant(g, id);
      if (n.op == OpCode::kIota) return EvalIota(g, id);
      break;  // parameters are filled in by Evaluate
  }
  return interp::NotHandled(g, id);
}

// Checks `params` against the graph's parameter nodes: count, shape, dtype and the number of
// values held.
Status CheckParams(const Graph& g, const std::vector<Tensor>& params) {
  int64_t count = 0;
  for (const Node& n : g.nodes) count += n.op == OpCode::kParameter;
  if (static_cast<int64_t>(params.size()) != count) {
    return InvalidArgument("Evaluate: the graph has " + std::to_string(count) +
                           " parameters, got " + std::to_string(params.size()) + " arguments");
  }
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const Node& n = g.nodes[id];
    if (n.op != OpCode::kParameter) continue;
    const int64_t p = n.parameter_number;
    const std::string what = "Evaluate: parameter " + std::to_string(p) + " ('" + n.name + "')";
    if (p < 0 || p >= count) return InvalidArgument(what + ": number out of range");
    const Tensor& t = params[p];
    if (t.shape != n.shape) {
      return InvalidArgument(what + " expects " + n.shape.ToString() + ", got " +
                             t.shape.ToString());
    }
    const bool is_float = IsFloat(t.shape.dtype);
    const size_t want = static_cast<size_t>(n.shape.elements());
    if ((is_float ? t.f.size() : t.i.size()) != want || !(is_float ? t.i.empty() : t.f.empty())) {
      return InvalidArgument(what + ": tensor of " + t.shape.ToString() + " holds " +
                             std::to_string(t.f.size()) + " float and " +
                             std::to_string(t.i.size()) + " integer values, expected " +
                             std::to_string(want) + (is_float ? " float" : " integer"));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<Tensor>> Evaluate(const Graph& g, const std::vector<Tensor>& params) {
  STITCH_RETURN_IF_ERROR(CheckParams(g, params));
  const std::vector<int> order = TopologicalOrder(g);
  const int n = static_cast<int>(g.nodes.size());
  for (int o : g.outputs) {
    if (o < 0 || o >= n) return InvalidArgument("Evaluate: output index out of range");
  }

  // Evaluate only what the outputs need, and free each value after its last use so peak
  // memory stays near the live set rather than the whole graph.
  const std::vector<bool> live = LiveNodes(g);
  std::vector<int> uses(n, 0);
  for (int id : order) {
    if (!live[id]) continue;
    for (int operand : g.nodes[id].operands) ++uses[operand];
  }
  for (int o : g.outputs) ++uses[o];  // outputs stay until the end

  std::vector<Tensor> values(n);
  for (int id : order) {
    if (!live[id]) continue;
    const Node& node = g.nodes[id];
    if (node.op == OpCode::kParameter) {
      Tensor t = params[node.parameter_number];
      for (int64_t& v : t.i) v = WrapInt(v, t.shape.dtype);
      values[id] = std::move(t);
    } else {
      StatusOr<Tensor> v = EvalNode(g, id, values);
      if (!v.ok()) return v.status();
      values[id] = std::move(v).value();
    }
    for (int operand : node.operands) {
      if (--uses[operand] == 0) values[operand] = Tensor{};
    }
  }
  std::vector<Tensor> results;
  results.reserve(g.outputs.size());
  for (int o : g.outputs) results.push_back(values[o]);
  return results;
}

}  // namespace stitch
