// Lowering of HLO's elementwise ops. Most map one to one onto the op of the op list with
// their spelling; compare, select and clamp need a little more.
#include "hlo_lowerer.h"

namespace stitch::hlo {
namespace {

// Returns a node of the instruction's op on its array operands, as many as the op takes.
StatusOr<Node> ElementwiseNode(const Instr& in) {
  const int arity = Arity(*in.op);
  STITCH_RETURN_IF_ERROR(in.NeedOperands(static_cast<size_t>(arity)));
  Node n;
  n.op = *in.op;
  for (int k = 0; k < arity; ++k) {
    STITCH_ASSIGN_OR_RETURN(int operand, in.ArrayOperand(k));
    n.operands.push_back(operand);
  }
  return n;
}

}  // namespace

StatusOr<Value> LowerElementwise(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, ElementwiseNode(in));
  return l.AddResult(in, std::move(n));
}

StatusOr<Value> LowerCompare(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, ElementwiseNode(in));
  const std::string* direction = in.Attr("direction");
  if (!direction) return in.Fail("missing attribute 'direction'");
  auto d = ParseCompareDirection(*direction);
  if (!d) return in.Fail("unknown comparison direction '" + *direction + "'");
  n.direction = *d;
  return l.AddResult(in, std::move(n));
}

// Scalar predicates (select) and bounds (clamp) are legal HLO; the IR wants them broadcast.
StatusOr<Value> LowerSelectOrClamp(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, ElementwiseNode(in));
  const std::vector<size_t> may_be_scalar =
      n.op == OpCode::kSelect ? std::vector<size_t>{0} : std::vector<size_t>{0, 2};
  for (size_t k : may_be_scalar) {
    if (l.ShapeOf(n.operands[k]).rank() == 0 && in.shape.rank() > 0) {
      n.operands[k] = l.Broadcast(n.operands[k], in.shape.dims, {}, ".bcast" + std::to_string(k));
    }
  }
  return l.AddResult(in, std::move(n));
}

}  // namespace stitch::hlo
