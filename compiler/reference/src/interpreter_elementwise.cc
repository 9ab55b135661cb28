// The reference interpreter's elementwise ops: float and integer math, compare, select,
// clamp and conversions, under the precision and integer rules stated in interpreter.cc.
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "interpreter_internal.h"
#include "numeric.h"

namespace stitch::interp {

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

namespace {

using internal::FloatToInt;
using internal::IntToFloat;
using internal::LowBits;
using internal::WrapInt;

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

}  // namespace

StatusOr<Tensor> EvalElementwise(const Graph& g, int id, const std::vector<const Tensor*>& ins) {
  const OpCode op = g.nodes[id].op;
  const DType t = ins[0]->shape.dtype;
  if (op == OpCode::kConvert || op == OpCode::kBitcastConvert) return EvalConvert(g, id, *ins[0]);
  if (op == OpCode::kCompare) return EvalCompare(g, id, *ins[0], *ins[1]);
  if (ins.size() == 3) return EvalTernary(g, id, *ins[0], *ins[1], *ins[2]);
  if (ins.size() == 2) {
    return IsFloat(t) ? EvalFloatBinary(g, id, *ins[0], *ins[1])
                      : EvalIntBinary(g, id, *ins[0], *ins[1]);
  }
  return IsFloat(t) ? EvalFloatUnary(g, id, *ins[0]) : EvalIntUnary(g, id, *ins[0]);
}

}  // namespace stitch::interp
