// What every lowering handler builds with: layouts and shapes read from the HLO text, the
// instruction's operands and attributes, and the Lowerer's node builders.
#include <limits>

#include "hlo_lowerer.h"

namespace stitch::hlo {

std::string Where(const std::string& source, int line) {
  return source + ":" + std::to_string(line);
}

const HloComputation* FindComputation(const HloModule& m, std::string_view raw_name) {
  std::string name = StripPercent(raw_name);
  for (const auto& c : m.computations) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

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

std::vector<int64_t> MajorToMinor(const std::vector<int64_t>& m2m) {
  return std::vector<int64_t>(m2m.rbegin(), m2m.rend());
}

std::vector<int64_t> InversePermutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inv[perm[k]] = static_cast<int64_t>(k);
  return inv;
}

Status CheckShapeSupported(const HloShape& s, const std::string& where, int depth) {
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

Value Leaf(int node) {
  Value v;
  v.node = node;
  return v;
}

Status Instr::Fail(const std::string& what) const {
  return InvalidArgument(where + ": " + ins.opcode + " '" + ins.name + "': " + what);
}

Status Instr::NeedOperands(size_t n) const {
  if (operands.size() != n) {
    return Fail("expected " + std::to_string(n) + " operands, got " +
                std::to_string(operands.size()));
  }
  return Status::Ok();
}

StatusOr<int> Instr::ArrayOperand(size_t k) const {
  if (operands[k]->is_tuple || operands[k]->node < 0) {
    return Fail("operand " + std::to_string(k) + " ('" + operand_ins[k]->name + "') is a tuple");
  }
  return operands[k]->node;
}

const std::string* Instr::Attr(const char* key) const {
  auto it = ins.attrs.find(key);
  return it == ins.attrs.end() ? nullptr : &it->second;
}

StatusOr<std::vector<int64_t>> Instr::IntListAttr(const char* key, bool required) const {
  const std::string* text = Attr(key);
  if (!text) {
    if (required) return Fail(std::string("missing attribute '") + key + "'");
    return std::vector<int64_t>{};
  }
  auto v = ParseIntList(*text);
  if (!v) return Fail(std::string("expected ") + key + "={i,j,...}, got '" + *text + "'");
  return *v;
}

int Lowerer::Add(Node n) {
  n.name = cur_name_ + n.name;
  n.source = cur_source_;
  return g_.Add(std::move(n));
}

Value Lowerer::AddResult(const Instr& in, Node n) {
  n.shape = in.shape;
  Value v;
  v.node = Add(std::move(n));
  v.m2m = in.m2m;
  return v;
}

int Lowerer::Transpose(int x, const std::vector<int64_t>& perm, const std::string& suffix) {
  Node n;
  n.op = OpCode::kTranspose;
  n.operands = {x};
  n.dimensions = perm;
  n.shape.dtype = ShapeOf(x).dtype;
  for (int64_t p : perm) n.shape.dims.push_back(ShapeOf(x).dims[p]);
  n.name = suffix;
  return Add(std::move(n));
}

int Lowerer::Reshape(int x, const std::vector<int64_t>& dims, const std::string& suffix) {
  if (ShapeOf(x).dims == dims) return x;
  Node n;
  n.op = OpCode::kReshape;
  n.operands = {x};
  n.shape = {ShapeOf(x).dtype, dims};
  n.name = suffix;
  return Add(std::move(n));
}

int Lowerer::Broadcast(int x, const std::vector<int64_t>& dims, const std::vector<int64_t>& map,
                       const std::string& suffix) {
  Node n;
  n.op = OpCode::kBroadcast;
  n.operands = {x};
  n.shape = {ShapeOf(x).dtype, dims};
  n.dimensions = map;
  n.name = suffix;
  return Add(std::move(n));
}

int Lowerer::ScalarConst(DType t, double v, const std::string& suffix) {
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

StatusOr<Shape> Lowerer::ArrayShape(const HloShape& s, const std::string& where) const {
  if (s.is_tuple) return InvalidArgument(where + ": expected an array shape, got a tuple");
  if (s.omitted) return InvalidArgument(where + ": expected an array shape, none is written");
  STITCH_RETURN_IF_ERROR(CheckShapeSupported(s, where));
  Shape r;
  r.dtype = *ParseDType(s.dtype);
  r.dims = s.dims;
  if (static_cast<int>(r.dims.size()) > opt_.limits.max_rank) {
    return ResourceExhausted(where + ": rank " + std::to_string(r.dims.size()) +
                             " is over the limit of " + std::to_string(opt_.limits.max_rank) +
                             " (max_tensor_rank)");
  }
  int64_t e = 1;
  for (int64_t d : r.dims) {
    if (d != 0 && e > std::numeric_limits<int64_t>::max() / d) {
      return ResourceExhausted(where + ": element count of " + s.ToString() + " overflows");
    }
    e *= d;
  }
  if (e > opt_.limits.max_elements_per_tensor) {
    return ResourceExhausted(where + ": " + s.ToString() + " has " + std::to_string(e) +
                             " elements, over the limit of " +
                             std::to_string(opt_.limits.max_elements_per_tensor) +
                             " (max_tensor_elements)");
  }
  return r;
}

}  // namespace stitch::hlo
