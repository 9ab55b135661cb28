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
#include "stitch/compiler/interpreter.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ir/numeric.h"
#include "stitch/compiler/philox.h"

namespace stitch {
namespace {

using internal::FloatToInt;
using internal::IntToFloat;
using internal::LowBits;
using internal::WrapInt;

Status NodeError(const Graph& g, int id, const std::string& why) {
  return InvalidArgument("node " + std::to_string(id) + " '" + g.nodes[id].name + "': " + why);
}

Status NotDefined(const Graph& g, int id, DType t) {
  return NodeError(
      g, id,
      std::string(OpCodeName(g.nodes[id].op)) + " is not defined for " + std::string(DTypeName(t)));
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Calls fn(k, idx) for every multi-index idx of `dims` in row-major order, k its linear index.
template <typename Fn>
void ForEachIndex(const std::vector<int64_t>& dims, Fn fn) {
  const int64_t n = Product(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(k, idx);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

// Calls fn(k, offset) for every multi-index j of `dims` in row-major order, with
// offset = base + sum_d j[d] * step[d] maintained incrementally (no per-element division).
template <typename Fn>
void ForEachAffine(const std::vector<int64_t>& dims, int64_t base, const std::vector<int64_t>& step,
                   Fn fn) {
  const int64_t n = Product(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t offset = base;
  for (int64_t k = 0; k < n; ++k) {
    fn(k, offset);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) {
        offset += step[d];
        break;
      }
      offset -= step[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// The value vector of `t` that holds elements of type V (double: f, int64_t: i).
std::vector<double>& Values(Tensor& t, double*) { return t.f; }
std::vector<int64_t>& Values(Tensor& t, int64_t*) { return t.i; }
const std::vector<double>& Values(const Tensor& t, double*) { return t.f; }
const std::vector<int64_t>& Values(const Tensor& t, int64_t*) { return t.i; }

// The value vector of `t` whose element type matches that of vector `like`.
template <typename Vec>
const Vec& SameKind(const Tensor& t, const Vec& like) {
  return Values(t, static_cast<typename Vec::value_type*>(nullptr));
}

// Applies fn to the vector of `in` that holds its values and the matching vector of `out`.
template <typename Fn>
void WithData(const Tensor& in, Tensor& out, Fn fn) {
  if (IsFloat(in.shape.dtype)) {
    fn(in.f, out.f);
  } else {
    fn(in.i, out.i);
  }
}

// Returns a tensor of `shape` with out[k] = in[base + sum j[d] * step[d]] (j the output
// multi-index): transpose, broadcast, slice and reverse are all such gathers.
Tensor Gather(const Tensor& in, const Shape& shape, int64_t base,
              const std::vector<int64_t>& step) {
  Tensor out = Tensor::Zeros(shape);
  WithData(in, out, [&](const auto& src, auto& dst) {
    ForEachAffine(shape.dims, base, step, [&](int64_t k, int64_t off) { dst[k] = src[off]; });
  });
  return out;
}

// ---------------------------------------------------------------------------------------
// Elementwise.

// Returns out[k] = fn(a[k]); the output vector (f or i) follows fn's result type.
template <typename In, typename Fn>
Tensor Map(const Shape& shape, const std::vector<In>& a, Fn fn) {
  using Out = std::decay_t<decltype(fn(a[0]))>;
  Tensor t;
  t.shape = shape;
  std::vector<Out>& out = Values(t, static_cast<Out*>(nullptr));
  out.resize(a.size());
  for (size_t k = 0; k < a.size(); ++k) out[k] = fn(a[k]);
  return t;
}

template <typename In, typename Fn>
Tensor Map2(const Shape& shape, const std::vector<In>& a, const std::vector<In>& b, Fn fn) {
  using Out = std::decay_t<decltype(fn(a[0], b[0]))>;
  Tensor t;
  t.shape = shape;
  std::vector<Out>& out = Values(t, static_cast<Out*>(nullptr));
  out.resize(a.size());
  for (size_t k = 0; k < a.size(); ++k) out[k] = fn(a[k], b[k]);
  return t;
}

// NaN-propagating max/min; between zeros of opposite sign, max prefers +0 and min -0.
double FMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double FMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

double RoundHalfEven(double x) {
  if (!std::isfinite(x)) return x;
  double r = std::floor(x);
  const double frac = x - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return std::copysign(r, x);  // keeps -0 for x in [-0.5, -0]
}

StatusOr<Tensor> EvalFloatUnary(const Graph& g, int id, const Tensor& a) {
  const Shape& s = g.nodes[id].shape;
  const std::vector<double>& x = a.f;
  switch (g.nodes[id].op) {
    case OpCode::kNeg:
      return Map(s, x, [](double v) { return -v; });
    case OpCode::kAbs:
      return Map(s, x, [](double v) { return std::fabs(v); });
    case OpCode::kExp:
      return Map(s, x, [](double v) { return std::exp(v); });
    case OpCode::kLog:
      return Map(s, x, [](double v) { return std::log(v); });
    case OpCode::kLog1p:
      return Map(s, x, [](double v) { return std::log1p(v); });
    case OpCode::kExpm1:
      return Map(s, x, [](double v) { return std::expm1(v); });
    case OpCode::kTanh:
      return Map(s, x, [](double v) { return std::tanh(v); });
    case OpCode::kLogistic:
      return Map(s, x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
    case OpCode::kSqrt:
      return Map(s, x, [](double v) { return std::sqrt(v); });
    case OpCode::kRsqrt:
      return Map(s, x, [](double v) { return 1.0 / std::sqrt(v); });
    case OpCode::kCbrt:
      return Map(s, x, [](double v) { return std::cbrt(v); });
    case OpCode::kErf:
      return Map(s, x, [](double v) { return std::erf(v); });
    case OpCode::kSin:
      return Map(s, x, [](double v) { return std::sin(v); });
    case OpCode::kCos:
      return Map(s, x, [](double v) { return std::cos(v); });
    case OpCode::kTan:
      return Map(s, x, [](double v) { return std::tan(v); });
    case OpCode::kFloor:
      return Map(s, x, [](double v) { return std::floor(v); });
    case OpCode::kCeil:
      return Map(s, x, [](double v) { return std::ceil(v); });
    case OpCode::kRound:
      return Map(s, x, [](double v) { return std::round(v); });  // half away from zero
    case OpCode::kRoundNearestEven:
      return Map(s, x, RoundHalfEven);
    case OpCode::kSign:
      return Map(s, x, [](double v) {
        if (std::isnan(v) || v == 0.0) return v;
        return v > 0.0 ? 1.0 : -1.0;
      });
    case OpCode::kIsFinite:
      return Map(s, x, [](double v) -> int64_t { return std::isfinite(v) ? 1 : 0; });
    default:
      return NotDefined(g, id, a.shape.dtype);
  }
}

StatusOr<Tensor> EvalIntUnary(const Graph& g, int id, const Tensor& a) {
  const Shape& s = g.nodes[id].shape;
  const DType t = a.shape.dtype;
  const std::vector<int64_t>& x = a.i;
  const bool is_unsigned = IsUnsignedInt(t);
  switch (g.nodes[id].op) {
    case OpCode::kNeg:
      return Map(s, x, [t](int64_t v) {
        return WrapInt(static_cast<int64_t>(0 - static_cast<uint64_t>(v)), t);
      });
    case OpCode::kAbs:
      return Map(s, x, [t, is_unsigned](int64_t v) {
        if (is_unsigned || v >= 0) return v;
        return WrapInt(static_cast<int64_t>(0 - static_cast<uint64_t>(v)), t);
      });
    case OpCode::kSign:
      return Map(s, x, [is_unsigned](int64_t v) -> int64_t {
        if (is_unsigned) return v != 0;
        return (v > 0) - (v < 0);
      });
    case OpCode::kNot:
      return Map(s, x, [t](int64_t v) { return t == DType::kPred ? (v ^ 1) : WrapInt(~v, t); });
    case OpCode::kPopcnt:
      return Map(s, x, [t](int64_t v) -> int64_t { return std::popcount(LowBits(v, t)); });
    default:
      return NotDefined(g, id, t);
  }
}

StatusOr<Tensor> EvalFloatBinary(const Graph& g, int id, const Tensor& a, const Tensor& b) {
  const Shape& s = g.nodes[id].shape;
  const std::vector<double>&x = a.f, &y = b.f;
  switch (g.nodes[id].op) {
    case OpCode::kAdd:
      return Map2(s, x, y, [](double u, double v) { return u + v; });
    case OpCode::kSub:
      return Map2(s, x, y, [](double u, double v) { return u - v; });
    case OpCode::kMul:
      return Map2(s, x, y, [](double u, double v) { return u * v; });
    case OpCode::kDiv:
      return Map2(s, x, y, [](double u, double v) { return u / v; });
    case OpCode::kPow:
      return Map2(s, x, y, [](double u, double v) { return std::pow(u, v); });
    case OpCode::kAtan2:
      return Map2(s, x, y, [](double u, double v) { return std::atan2(u, v); });
    case OpCode::kRem:
      return Map2(s, x, y, [](double u, double v) { return std::fmod(u, v); });
    case OpCode::kMax:
      return Map2(s, x, y, FMax);
    case OpCode::kMin:
      return Map2(s, x, y, FMin);
    default:
      return NotDefined(g, id, a.shape.dtype);
  }
}

// Signed or unsigned "less than" of two normalised integers of dtype t.
bool IntLess(int64_t u, int64_t v, bool is_unsigned) {
  return is_unsigned ? static_cast<uint64_t>(u) < static_cast<uint64_t>(v) : u < v;
}

StatusOr<Tensor> EvalIntBinary(const Graph& g, int id, const Tensor& a, const Tensor& b) {
  const Shape& s = g.nodes[id].shape;
  const DType t = a.shape.dtype;
  const bool is_unsigned = IsUnsignedInt(t);
  const int bits = IntegerBits(t);
  const std::vector<int64_t>&x = a.i, &y = b.i;
  auto wrap = [t](uint64_t v) { return WrapInt(static_cast<int64_t>(v), t); };
  switch (g.nodes[id].op) {
    case OpCode::kAdd:
      return Map2(s, x, y, [&](int64_t u, int64_t v) {
        return wrap(static_cast<uint64_t>(u) + static_cast<uint64_t>(v));
      });
    case OpCode::kSub:
      return Map2(s, x, y, [&](int64_t u, int64_t v) {
        return wrap(static_cast<uint64_t>(u) - static_cast<uint64_t>(v));
      });
    case OpCode::kMul:
      return Map2(s, x, y, [&](int64_t u, int64_t v) {
        return wrap(static_cast<uint64_t>(u) * static_cast<uint64_t>(v));
      });
    case OpCode::kDiv:
      return Map2(s, x, y, [&](int64_t u, int64_t v) -> int64_t {
        if (v == 0) return WrapInt(-1, t);  // all ones, for signed and unsigned alike
        if (is_unsigned) return wrap(static_cast<uint64_t>(u) / static_cast<uint64_t>(v));
        // INT_MIN / -1 overflows to INT_MIN: negation wraps (also avoids UB for s64).
        if (v == -1) return wrap(0 - static_cast<uint64_t>(u));
        return wrap(static_cast<uint64_t>(u / v));
      });
    case OpCode::kRem:
      return Map2(s, x, y, [&](int64_t u, int64_t v) -> int64_t {
        if (v == 0) return u;
        if (is_unsigned) return wrap(static_cast<uint64_t>(u) % static_cast<uint64_t>(v));
        if (v == -1) return 0;  // INT_MIN rem -1 = 0 (and no UB for s64)
        return u % v;           // C++ truncates: the sign of the dividend
      });
    case OpCode::kMax:
      return Map2(s, x, y,
                  [&](int64_t u, int64_t v) { return IntLess(u, v, is_unsigned) ? v : u; });
    case OpCode::kMin:
      return Map2(s, x, y,
                  [&](int64_t u, int64_t v) { return IntLess(u, v, is_unsigned) ? u : v; });
    case OpCode::kAnd:
      return Map2(s, x, y, [](int64_t u, int64_t v) { return u & v; });
    case OpCode::kOr:
      return Map2(s, x, y, [](int64_t u, int64_t v) { return u | v; });
    case OpCode::kXor:
      return Map2(s, x, y, [](int64_t u, int64_t v) { return u ^ v; });
    case OpCode::kShiftLeft:
      return Map2(s, x, y, [&](int64_t u, int64_t v) -> int64_t {
        const uint64_t amount = LowBits(v, t);  // the amount is read as unsigned
        if (amount >= static_cast<uint64_t>(bits)) return 0;
        return wrap(static_cast<uint64_t>(u) << amount);
      });
    case OpCode::kShiftRightLogical:
      return Map2(s, x, y, [&](int64_t u, int64_t v) -> int64_t {
        const uint64_t amount = LowBits(v, t);
        if (amount >= static_cast<uint64_t>(bits)) return 0;
        return wrap(LowBits(u, t) >> amount);
      });
    case OpCode::kShiftRightArithmetic:
      return Map2(s, x, y, [&](int64_t u, int64_t v) -> int64_t {
        // The operand's bits read as signed, whatever the dtype (u8 0x80 >> 1 is 0xc0).
        const int64_t value =
            bits >= 64 ? u : static_cast<int64_t>(LowBits(u, t) << (64 - bits)) >> (64 - bits);
        const uint64_t amount = LowBits(v, t);
        if (amount >= static_cast<uint64_t>(bits)) return WrapInt(value < 0 ? -1 : 0, t);
        return WrapInt(value >> amount, t);
      });
    default:
      return NotDefined(g, id, t);
  }
}

StatusOr<Tensor> EvalCompare(const Graph& g, int id, const Tensor& a, const Tensor& b) {
  const Node& n = g.nodes[id];
  const CompareDirection dir = n.direction;
  // Written as `less` and `equal` of two values so one switch serves floats and integers.
  // For floats, IEEE comparisons already give "false with NaN, except NE".
  auto decide = [dir](bool lt, bool eq, bool gt) -> int64_t {
    switch (dir) {
      case CompareDirection::kEq:
        return eq;
      case CompareDirection::kNe:
        return !eq;
      case CompareDirection::kLt:
        return lt;
      case CompareDirection::kLe:
        return lt || eq;
      case CompareDirection::kGt:
        return gt;
      case CompareDirection::kGe:
        return gt || eq;
    }
    return 0;
  };
  if (IsFloat(a.shape.dtype)) {
    return Map2(n.shape, a.f, b.f, [&](double u, double v) { return decide(u<v, u == v, u> v); });
  }
  const bool is_unsigned = IsUnsignedInt(a.shape.dtype);
  return Map2(n.shape, a.i, b.i, [&](int64_t u, int64_t v) {
    return decide(IntLess(u, v, is_unsigned), u == v, IntLess(v, u, is_unsigned));
  });
}

// select(p, a, b) and clamp(lo, x, hi) = min(max(x, lo), hi).
StatusOr<Tensor> EvalTernary(const Graph& g, int id, const Tensor& a, const Tensor& b,
                             const Tensor& c) {
  const Node& n = g.nodes[id];
  const int64_t count = n.shape.elements();
  Tensor out = Tensor::Zeros(n.shape);
  if (n.op == OpCode::kSelect) {
    WithData(b, out, [&](const auto& on_true, auto& dst) {
      const auto& on_false = SameKind(c, on_true);
      for (int64_t k = 0; k < count; ++k) dst[k] = a.i[k] ? on_true[k] : on_false[k];
    });
    return out;
  }
  if (IsFloat(n.shape.dtype)) {
    for (int64_t k = 0; k < count; ++k) out.f[k] = FMin(FMax(b.f[k], a.f[k]), c.f[k]);
    return out;
  }
  const bool is_unsigned = IsUnsignedInt(n.shape.dtype);
  for (int64_t k = 0; k < count; ++k) {
    int64_t v = b.i[k];
    if (IntLess(v, a.i[k], is_unsigned)) v = a.i[k];
    if (IntLess(c.i[k], v, is_unsigned)) v = c.i[k];
    out.i[k] = v;
  }
  return out;
}

StatusOr<Tensor> EvalConvert(const Graph& g, int id, const Tensor& a) {
  const Node& n = g.nodes[id];
  const DType src = a.shape.dtype, dst = n.shape.dtype;
  if (n.op == OpCode::kBitcastConvert) {
    if (DTypeBytes(src) != DTypeBytes(dst)) {
      return NodeError(g, id, "bitcast-convert between dtypes of different widths");
    }
    Tensor out = Tensor::Zeros(n.shape);
    for (int64_t k = 0; k < out.size(); ++k) {
      const uint64_t bits =
          IsFloat(src) ? internal::FloatToBits(a.f[k], src) : LowBits(a.i[k], src);
      if (IsFloat(dst)) {
        out.f[k] = internal::BitsToFloat(bits, dst);
      } else {
        out.i[k] = WrapInt(static_cast<int64_t>(bits), dst);
      }
    }
    return out;
  }
  if (IsFloat(src)) {
    if (IsFloat(dst)) return Map(n.shape, a.f, [dst](double v) { return RoundToDType(v, dst); });
    return Map(n.shape, a.f, [dst](double v) { return FloatToInt(v, dst); });
  }
  if (IsFloat(dst)) {
    return Map(n.shape, a.i, [src, dst](int64_t v) { return IntToFloat(v, src, dst); });
  }
  if (dst == DType::kPred) return Map(n.shape, a.i, [](int64_t v) -> int64_t { return v != 0; });
  // Integers are held sign- or zero-extended by their own dtype, so wrapping to the
  // destination's width keeps the low bits of the extended value, as SEMANTICS.md asks.
  return Map(n.shape, a.i, [dst](int64_t v) { return WrapInt(v, dst); });
}

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
// Data movement.

Tensor EvalBroadcast(const Node& n, const Tensor& in) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape.dims);
  std::vector<int64_t> step(n.shape.rank(), 0);  // output dims not mapped repeat the operand
  for (size_t i = 0; i < n.dimensions.size(); ++i) step[n.dimensions[i]] = in_strides[i];
  return Gather(in, n.shape, 0, step);
}

Tensor EvalReshape(const Node& n, const Tensor& in) {
  Tensor out = in;
  out.shape = n.shape;
  return out;
}

Tensor EvalTranspose(const Node& n, const Tensor& in) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape.dims);
  std::vector<int64_t> step(n.shape.rank());
  for (int i = 0; i < n.shape.rank(); ++i) step[i] = in_strides[n.dimensions[i]];
  return Gather(in, n.shape, 0, step);
}

Tensor EvalSlice(const Node& n, const Tensor& in) {
  const std::vector<int64_t> in_strides = RowMajorStrides(in.shape.dims);
  int64_t base = 0;
  std::vector<int64_t> step(n.shape.rank());
  for (int d = 0; d < n.shape.rank(); ++d) {
    base += n.slice_starts[d] * in_strides[d];
    step[d] = n.slice_strides[d] * in_strides[d];
  }
  return Gather(in, n.shape, base, step);
}

Tensor EvalReverse(const Node& n, const Tensor& in) {
  std::vector<int64_t> step = RowMajorStrides(in.shape.dims);
  int64_t base = 0;
  for (int64_t d : n.dimensions) {
    base += (in.shape.dims[d] - 1) * step[d];
    step[d] = -step[d];
  }
  return Gather(in, n.shape, base, step);
}

Tensor EvalConcatenate(const Node& n, const std::vector<const Tensor*>& ins) {
  // View every tensor as [outer, dim * inner]: each operand contributes one contiguous run
  // per outer index.
  const int axis = static_cast<int>(n.dimensions[0]);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= n.shape.dims[d];
  for (int d = axis + 1; d < n.shape.rank(); ++d) inner *= n.shape.dims[d];
  const int64_t out_row = n.shape.dims[axis] * inner;
  Tensor out = Tensor::Zeros(n.shape);
  int64_t column = 0;
  for (const Tensor* in : ins) {
    const int64_t run = in->shape.dims[axis] * inner;
    WithData(*in, out, [&](const auto& src, auto& dst) {
      for (int64_t o = 0; o < outer; ++o) {
        std::copy_n(src.begin() + o * run, run, dst.begin() + o * out_row + column);
      }
    });
    column += run;
  }
  return out;
}

Tensor EvalPad(const Node& n, const Tensor& in, const Tensor& pad_value) {
  Tensor out = Tensor::Zeros(n.shape);
  const std::vector<int64_t> out_strides = RowMajorStrides(n.shape.dims);
  const int rank = n.shape.rank();
  WithData(in, out, [&](const auto& src, auto& dst) {
    std::fill(dst.begin(), dst.end(), SameKind(pad_value, src)[0]);
    // Operand element j lands at low + j * (interior + 1) in each dimension; negative low or
    // high crop whatever lands outside the output.
    ForEachIndex(in.shape.dims, [&](int64_t k, const std::vector<int64_t>& j) {
      int64_t offset = 0;
      for (int d = 0; d < rank; ++d) {
        const int64_t p = n.pad_low[d] + j[d] * (n.pad_interior[d] + 1);
        if (p < 0 || p >= n.shape.dims[d]) return;
        offset += p * out_strides[d];
      }
      dst[offset] = src[k];
    });
  });
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
      if (n.op == OpCode::kConvert || n.op == OpCode::kBitcastConvert) break;
      if (n.op == OpCode::kCompare) {
        dtypes_ok = out == DType::kPred && all_are(0, ins[0]->shape.dtype);
      } else if (n.op == OpCode::kIsFinite) {
        dtypes_ok = out == DType::kPred;
      } else if (n.op == OpCode::kSelect) {
        dtypes_ok = ins[0]->shape.dtype == DType::kPred && all_are(1, out);
      } else {
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
    case OpClass::kElementwise: {
      const DType t = ins[0]->shape.dtype;
      if (n.op == OpCode::kConvert || n.op == OpCode::kBitcastConvert)
        return EvalConvert(g, id, *ins[0]);
      if (n.op == OpCode::kCompare) return EvalCompare(g, id, *ins[0], *ins[1]);
      if (ins.size() == 3) return EvalTernary(g, id, *ins[0], *ins[1], *ins[2]);
      if (ins.size() == 2) {
        return IsFloat(t) ? EvalFloatBinary(g, id, *ins[0], *ins[1])
                          : EvalIntBinary(g, id, *ins[0], *ins[1]);
      }
      return IsFloat(t) ? EvalFloatUnary(g, id, *ins[0]) : EvalIntUnary(g, id, *ins[0]);
    }
    case OpClass::kDataMovement:
      switch (n.op) {
        case OpCode::kBroadcast:
          return EvalBroadcast(n, *ins[0]);
        case OpCode::kReshape:
          return EvalReshape(n, *ins[0]);
        case OpCode::kTranspose:
          return EvalTranspose(n, *ins[0]);
        case OpCode::kSlice:
          return EvalSlice(n, *ins[0]);
        case OpCode::kConcatenate:
          return EvalConcatenate(n, ins);
        case OpCode::kPad:
          return EvalPad(n, *ins[0], *ins[1]);
        case OpCode::kReverse:
          return EvalReverse(n, *ins[0]);
        default:
          break;
      }
      break;
    case OpClass::kReduce:
      return EvalReduce(g, id, *ins[0], *ins[1]);
    case OpClass::kRng:
      return EvalRng(g, id, *ins[0]);
    case OpClass::kLeaf:
      if (n.op == OpCode::kConstant) return EvalConstant(g, id);
      if (n.op == OpCode::kIota) return EvalIota(g, id);
      break;  // parameters are filled in by Evaluate
  }
  return NodeError(g, id, "op " + std::string(OpCodeName(n.op)) + " is not handled");
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
  std::vector<char> live(n, 0);
  for (int o : g.outputs) live[o] = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!live[*it]) continue;
    for (int operand : g.nodes[*it].operands) live[operand] = 1;
  }
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
