// Lowering of HLO's data-movement and layout ops: copy, broadcast, reshape, bitcast,
// transpose, reverse, slice, concatenate and pad.
#include "hlo_lowerer.h"

namespace stitch::hlo {
namespace {

// Returns a node of the instruction's op on its single array operand.
StatusOr<Node> UnaryNode(const Instr& in, OpCode op) {
  STITCH_RETURN_IF_ERROR(in.NeedOperands(1));
  STITCH_ASSIGN_OR_RETURN(int operand, in.ArrayOperand(0));
  Node n;
  n.op = op;
  n.operands = {operand};
  return n;
}

}  // namespace

// A copy changes the physical layout only; the logical value is unchanged. Any layout
// difference becomes a transpose where the value enters or leaves the graph.
StatusOr<Value> LowerCopy(Lowerer& l, const Instr& in) {
  STITCH_RETURN_IF_ERROR(in.NeedOperands(1));
  Value v;
  STITCH_ASSIGN_OR_RETURN(v.node, in.ArrayOperand(0));
  v.m2m = in.m2m;
  if (l.ShapeOf(v.node) != in.shape) return in.Fail("result shape differs from the operand's");
  return v;
}

StatusOr<Value> LowerBroadcast(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, UnaryNode(in, OpCode::kBroadcast));
  STITCH_ASSIGN_OR_RETURN(n.dimensions, in.IntListAttr("dimensions", true));
  return l.AddResult(in, std::move(n));
}

StatusOr<Value> LowerReshape(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, UnaryNode(in, OpCode::kReshape));
  return l.AddResult(in, std::move(n));
}

// A bitcast reinterprets the buffer: the operand goes to its physical order, is reshaped to
// the result's physical dims, and comes back to the result's logical order.
StatusOr<Value> LowerBitcast(Lowerer& l, const Instr& in) {
  STITCH_RETURN_IF_ERROR(in.NeedOperands(1));
  STITCH_ASSIGN_OR_RETURN(int operand, in.ArrayOperand(0));
  const Shape& shape = in.shape;
  if (l.ShapeOf(operand).dtype != shape.dtype) {
    return Unimplemented(in.where + ": bitcast '" + in.ins.name +
                         "' changes the element type; use bitcast-convert");
  }
  const std::vector<int64_t>& in_m2m = in.operands[0]->m2m;
  int phys = operand;
  if (!in_m2m.empty() && static_cast<int>(in_m2m.size()) == l.ShapeOf(operand).rank()) {
    phys = l.Transpose(operand, MajorToMinor(in_m2m), ".in_physical");
  }
  std::vector<int64_t> out_major;
  std::vector<int64_t> phys_dims = shape.dims;
  if (!in.m2m.empty()) {
    out_major = MajorToMinor(in.m2m);
    for (size_t k = 0; k < out_major.size(); ++k) phys_dims[k] = shape.dims[out_major[k]];
  }
  int64_t in_elems = 1, out_elems = 1;
  for (int64_t d : l.ShapeOf(operand).dims) in_elems *= d;
  for (int64_t d : phys_dims) out_elems *= d;
  if (in_elems != out_elems) return in.Fail("element count differs from the operand's");
  Value v;
  v.m2m = in.m2m;
  v.node = l.Reshape(phys, phys_dims, "");
  if (!out_major.empty()) v.node = l.Transpose(v.node, InversePermutation(out_major), ".logical");
  return v;
}

// Transpose and reverse both take their operand and a list of dimensions.
StatusOr<Value> LowerTransposeOrReverse(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, UnaryNode(in, *in.op));
  STITCH_ASSIGN_OR_RETURN(n.dimensions, in.IntListAttr("dimensions", true));
  return l.AddResult(in, std::move(n));
}

StatusOr<Value> LowerSlice(Lowerer& l, const Instr& in) {
  STITCH_ASSIGN_OR_RETURN(Node n, UnaryNode(in, OpCode::kSlice));
  const std::string* text = in.Attr("slice");
  if (!text) return in.Fail("missing attribute 'slice'");
  auto dims = ParseSliceAttr(*text);
  if (!dims) return in.Fail("expected slice={[start:limit:stride], ...}, got '" + *text + "'");
  for (const auto& d : *dims) {
    n.slice_starts.push_back(d.start);
    n.slice_limits.push_back(d.limit);
    n.slice_strides.push_back(d.stride);
  }
  return l.AddResult(in, std::move(n));
}

StatusOr<Value> LowerConcatenate(Lowerer& l, const Instr& in) {
  if (in.operands.empty()) return in.Fail("expected at least one operand");
  Node n;
  n.op = OpCode::kConcatenate;
  for (size_t k = 0; k < in.operands.size(); ++k) {
    STITCH_ASSIGN_OR_RETURN(int operand, in.ArrayOperand(k));
    n.operands.push_back(operand);
  }
  STITCH_ASSIGN_OR_RETURN(n.dimensions, in.IntListAttr("dimensions", true));
  return l.AddResult(in, std::move(n));
}

StatusOr<Value> LowerPad(Lowerer& l, const Instr& in) {
  STITCH_RETURN_IF_ERROR(in.NeedOperands(2));
  Node n;
  n.op = OpCode::kPad;
  for (size_t k = 0; k < 2; ++k) {
    STITCH_ASSIGN_OR_RETURN(int operand, in.ArrayOperand(k));
    n.operands.push_back(operand);
  }
  const std::string* text = in.Attr("padding");
  if (!text) return in.Fail("missing attribute 'padding'");
  auto dims = ParsePaddingAttr(*text);
  if (!dims) return in.Fail("expected padding=low_high[_interior]x..., got '" + *text + "'");
  for (const auto& d : *dims) {
    n.pad_low.push_back(d.low);
    n.pad_high.push_back(d.high);
    n.pad_interior.push_back(d.interior);
  }
  return l.AddResult(in, std::move(n));
}

}  // namespace stitch::hlo
