#include "device_math.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace stitch::codegen {
namespace {

using llvm::Value;

// Builds function bodies in double precision; the float versions convert around them.
// Every body is straight-line code (selects, no branches), which keeps them easy to inline.
class MathBuilder {
 public:
  explicit MathBuilder(llvm::Module& m) : m_(m), b_(m.getContext()) {}

  // Returns the definition of `name`, defining it (and what it uses) if needed; nullptr
  // when stitch has no definition for it.
  llvm::Function* Get(const std::string& name);

 private:
  using Body = std::function<Value*(const std::vector<Value*>&)>;
  struct Def {
    int arity;
    Body body;
  };
  const std::map<std::string, Def>& Table();

  Value* C(double v) { return llvm::ConstantFP::get(b_.getDoubleTy(), v); }
  Value* I64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }
  Value* Un(llvm::Intrinsic::ID id, Value* x) {
    return b_.CreateIntrinsic(id, {x->getType()}, {x});
  }
  Value* Fma(Value* a, Value* c, Value* d) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {a, c, d});
  }
  Value* Abs(Value* x) { return Un(llvm::Intrinsic::fabs, x); }
  Value* Copysign(Value* mag, Value* sign) {
    return b_.CreateIntrinsic(llvm::Intrinsic::copysign, {mag->getType()}, {mag, sign});
  }
  Value* Sel(Value* c, Value* t, Value* f) { return b_.CreateSelect(c, t, f); }
  Value* IsNan(Value* x) { return b_.CreateFCmpUNO(x, x); }
  Value* Add(Value* a, Value* c) { return b_.CreateFAdd(a, c); }
  Value* Sub(Value* a, Value* c) { return b_.CreateFSub(a, c); }
  Value* Mul(Value* a, Value* c) { return b_.CreateFMul(a, c); }
  Value* Div(Value* a, Value* c) { return b_.CreateFDiv(a, c); }
  Value* Call(const std::string& name, std::vector<Value*> args) {
    return b_.CreateCall(Get(name), args);
  }
  // Horner evaluation of sum coeffs[i] * z^i.
  Value* Poly(Value* z, const std::vector<double>& coeffs) {
    Value* acc = C(coeffs.back());
    for (int i = static_cast<int>(coeffs.size()) - 2; i >= 0; --i) acc = Fma(acc, z, C(coeffs[i]));
    return acc;
  }
  // 2^k for an i64 k in [-1022, 1023].
  Value* Pow2(Value* k) {
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(k, I64(1023)), 52), b_.getDoubleTy());
  }
  Value* ToInt(Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {b_.getInt64Ty(), x->getType()}, {x});
  }

  Value* Exp(Value* x);
  Value* Log(Value* x);
  Value* Erf(Value* x);
  std::pair<Value*, Value*> SinCos(Value* x);
  Value* Atan2(Value* y, Value* x);
  Value* Pow(Value* x, Value* y);
  Value* Fmod(Value* x, Value* y);

  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  std::map<std::string, Def> table_;
};

Value* MathBuilder::Exp(Value* x) {
  // Clamp far enough out that the result is already 0 or inf; NaN passes through.
  Value* xc = Sel(b_.CreateFCmpOGT(x, C(710.0)), C(710.0), x);
  xc = Sel(b_.CreateFCmpOLT(xc, C(-746.0)), C(-746.0), xc);
  Value* n = Un(llvm::Intrinsic::rint, Mul(xc, C(1.4426950408889634)));
  Value* r = Fma(b_.CreateFNeg(n), C(6.93147180369123816490e-01), xc);
  r = Fma(b_.CreateFNeg(n), C(1.90821492927058770002e-10), r);
  std::vector<double> c(14);
  double f = 1.0;
  for (int i = 0; i < 14; ++i) {
    if (i > 0) f *= i;
    c[i] = 1.0 / f;
  }
  Value* p = Poly(r, c);
  Value* k = ToInt(n);
  Value* half = b_.CreateSDiv(k, I64(2));
  return Mul(Mul(p, Pow2(half)), Pow2(b_.CreateSub(k, half)));
}

Value* MathBuilder::Log(Value* x) {
  Value* tiny = b_.CreateFCmpOLT(x, C(2.2250738585072014e-308));
  Value* xs = Sel(tiny, Mul(x, C(18014398509481984.0)), x);  // 2^54
  Value* bits = b_.CreateBitCast(xs, b_.getInt64Ty());
  Value* e = b_.CreateSub(b_.CreateLShr(bits, 52), I64(1023));
  e = b_.CreateSub(e, Sel(tiny, I64(54), I64(0)));
  Value* mbits =
      b_.CreateOr(b_.CreateAnd(bits, I64(0x000fffffffffffffLL)), I64(0x3ff0000000000000LL));
  Value* m = b_.CreateBitCast(mbits, b_.getDoubleTy());
  Value* big = b_.CreateFCmpOGT(m, C(1.4142135623730951));
  m = Sel(big, Mul(m, C(0.5)), m);
  e = b_.CreateAdd(e, Sel(big, I64(1), I64(0)));
  Value* s = Div(Sub(m, C(1.0)), Add(m, C(1.0)));
  Value* z = Mul(s, s);
  std::vector<double> c;
  for (int k = 0; k < 13; ++k) c.push_back(2.0 / (2 * k + 1));
  Value* lm = Mul(s, Poly(z, c));
  Value* ef = b_.CreateSIToFP(e, b_.getDoubleTy());
  Value* r =
      Add(Mul(ef, C(6.93147180369123816490e-01)), Fma(ef, C(1.90821492927058770002e-10), lm));
  r = Sel(b_.CreateFCmpOEQ(x, C(0.0)), C(-INFINITY), r);
  r = Sel(b_.CreateFCmpOEQ(x, C(INFINITY)), C(INFINITY), r);
  return Sel(b_.CreateFCmpULT(x, C(0.0)), C(NAN), r);  // also NaN for NaN
}

Value* MathBuilder::Erf(Value* x) {
  Value* ax = Abs(x);
  // Taylor series for small |x| (converges everywhere; cancellation is mild below 2.5).
  std::vector<double> c;
  double fact = 1.0;
  for (int n = 0; n < 45; ++n) {
    if (n > 0) fact *= n;
    double sign = (n % 2) ? -1.0 : 1.0;
    c.push_back(sign * 1.1283791670955126 / (fact * (2 * n + 1)));
  }
  Value* series = Mul(ax, Poly(Mul(ax, ax), c));
  // Continued fraction for erfc for larger |x|, evaluated bottom-up.
  Value* xcf = Sel(b_.CreateFCmpOLT(ax, C(1.0)), C(1.0), ax);
  Value* f = xcf;
  for (int k = 60; k >= 1; --k) f = Add(xcf, Div(C(k * 0.5), f));
  Value* erfc = Div(Exp(b_.CreateFNeg(Mul(xcf, xcf))), Mul(C(1.7724538509055159), f));
  Value* r = Sel(b_.CreateFCmpOLT(ax, C(2.5)), series, Sub(C(1.0), erfc));
  r = Sel(b_.CreateFCmpOGE(ax, C(6.0)), C(1.0), r);
  r = Copysign(r, x);
  return Sel(IsNan(x), x, r);
}

std::pair<Value*, Value*> MathBuilder::SinCos(Value* x) {
  Value* k = Un(llvm::Intrinsic::rint, Mul(x, C(0.63661977236758134)));
  Value* nk = b_.CreateFNeg(k);
  Value* r = Fma(nk, C(1.57079632673412561417e+00), x);
  r = Fma(nk, C(6.07710050630396597660e-11), r);
  r = Fma(nk, C(2.02226624879595063154e-21), r);
  Value* z = Mul(r, r);
  std::vector<double> sc, cc;
  double fact = 1.0;
  for (int n = 0; n < 20; ++n) {
    if (n > 0) fact *= n;
    double sign = ((n / 2) % 2) ? -1.0 : 1.0;
    if (n % 2)
      sc.push_back(sign / fact);
    else
      cc.push_back(sign / fact);
  }
  Value* s = Mul(r, Poly(z, sc));
  Value* c = Poly(z, cc);
  Value* q = b_.CreateAnd(ToInt(k), I64(3));
  auto pick = [&](Value* v0, Value* v1, Value* v2, Value* v3) {
    Value* v = Sel(b_.CreateICmpEQ(q, I64(0)), v0, v3);
    v = Sel(b_.CreateICmpEQ(q, I64(1)), v1, v);
    return Sel(b_.CreateICmpEQ(q, I64(2)), v2, v);
  };
  Value* ns = b_.CreateFNeg(s);
  Value* nc = b_.CreateFNeg(c);
  Value* sin = pick(s, c, ns, nc);
  Value* cos = pick(c, ns, nc, s);
  // Keep the sign of zero for sin(+-0).
  sin = Sel(b_.CreateFCmpOEQ(x, C(0.0)), x, sin);
  return {sin, cos};
}

Value* MathBuilder::Atan2(Value* y, Value* x) {
  Value* ax = Abs(x);
  Value* ay = Abs(y);
  Value* swap = b_.CreateFCmpOGT(ay, ax);
  Value* mx = Sel(swap, ay, ax);
  Value* mn = Sel(swap, ax, ay);
  Value* a = Div(mn, mx);
  a = Sel(b_.CreateFCmpOEQ(mx, C(0.0)), C(0.0), a);
  Value* both_inf =
      b_.CreateAnd(b_.CreateFCmpOEQ(ax, C(INFINITY)), b_.CreateFCmpOEQ(ay, C(INFINITY)));
  a = Sel(both_inf, C(1.0), a);
  Value* hi = b_.CreateFCmpOGT(a, C(0.41421356237309503));
  Value* t = Sel(hi, Div(Sub(a, C(1.0)), Add(a, C(1.0))), a);
  std::vector<double> c;
  for (int n = 0; n < 24; ++n) c.push_back(((n % 2) ? -1.0 : 1.0) / (2 * n + 1));
  Value* r = Add(Sel(hi, C(0.78539816339744831), C(0.0)), Mul(t, Poly(Mul(t, t), c)));
  r = Sel(swap, Sub(C(1.5707963267948966), r), r);
  Value* x_neg = b_.CreateICmpSLT(b_.CreateBitCast(x, b_.getInt64Ty()), I64(0));
  r = Sel(x_neg, Sub(C(3.1415926535897931), r), r);
  r = Copysign(r, y);
  return Sel(b_.CreateOr(IsNan(x), IsNan(y)), C(NAN), r);
}

Value* MathBuilder::Pow(Value* x, Value* y) {
  Value* ax = Abs(x);
  Value* r = Exp(Mul(y, Log(ax)));
  Value* y_int = b_.CreateFCmpOEQ(Un(llvm::Intrinsic::floor, y), y);
  Value* half = Mul(y, C(0.5));
  Value* y_odd = b_.CreateAnd(y_int, b_.CreateFCmpONE(Un(llvm::Intrinsic::floor, half), half));
  Value* x_neg = b_.CreateFCmpOLT(x, C(0.0));
  r = Sel(b_.CreateAnd(x_neg, y_odd), b_.CreateFNeg(r), r);
  // A negative finite base needs an integer exponent; (-inf)^y is handled like inf^y.
  Value* x_finite = b_.CreateFCmpOLT(ax, C(INFINITY));
  r = Sel(b_.CreateAnd(b_.CreateAnd(x_neg, x_finite), b_.CreateNot(y_int)), C(NAN), r);
  // Zeros: signed result only for odd integer exponents.
  Value* zero_res = Sel(b_.CreateFCmpOLT(y, C(0.0)), C(INFINITY), C(0.0));
  zero_res = Sel(y_odd, Copysign(zero_res, x), zero_res);
  r = Sel(b_.CreateFCmpOEQ(x, C(0.0)), zero_res, r);
  Value* one = b_.CreateOr(b_.CreateFCmpOEQ(y, C(0.0)), b_.CreateFCmpOEQ(x, C(1.0)));
  one = b_.CreateOr(
      one, b_.CreateAnd(b_.CreateFCmpOEQ(ax, C(1.0)), b_.CreateFCmpOEQ(Abs(y), C(INFINITY))));
  r = Sel(one, C(1.0), r);
  return Sel(b_.CreateAnd(b_.CreateNot(one), b_.CreateOr(IsNan(x), IsNan(y))), C(NAN), r);
}

Value* MathBuilder::Fmod(Value* x, Value* y) {
  Value* ay = Abs(y);
  Value* q = Un(llvm::Intrinsic::trunc, Div(x, y));
  Value* r = Fma(b_.CreateFNeg(q), y, x);
  // One correction step for a quotient that rounded across an integer.
  Value* wrong_sign =
      b_.CreateAnd(b_.CreateFCmpONE(r, C(0.0)),
                   b_.CreateICmpNE(b_.CreateFCmpOLT(r, C(0.0)), b_.CreateFCmpOLT(x, C(0.0))));
  r = Sel(wrong_sign, Add(r, Copysign(ay, x)), r);
  r = Sel(b_.CreateFCmpOGE(Abs(r), ay), Sub(r, Copysign(ay, x)), r);
  r = Copysign(r, x);
  r = Sel(b_.CreateFCmpOEQ(ay, C(INFINITY)), x, r);
  Value* invalid = b_.CreateOr(b_.CreateFCmpOEQ(y, C(0.0)), b_.CreateFCmpOEQ(Abs(x), C(INFINITY)));
  invalid = b_.CreateOr(invalid, b_.CreateOr(IsNan(x), IsNan(y)));
  return Sel(invalid, C(NAN), r);
}

const std::map<std::string, MathBuilder::Def>& MathBuilder::Table() {
  if (!table_.empty()) return table_;
  using A = const std::vector<Value*>&;
  auto un = [this](llvm::Intrinsic::ID id) {
    return Def{1, [this, id](A a) { return Un(id, a[0]); }};
  };
  table_ = {
      {"exp", {1, [this](A a) { return Exp(a[0]); }}},
      {"log", {1, [this](A a) { return Log(a[0]); }}},
      {"log1p",
       {1,
        [this](A a) {
          Value* x = a[0];
          Value* u = Add(C(1.0), x);
          Value* r = Mul(Log(u), Div(x, Sub(u, C(1.0))));
          r = Sel(b_.CreateFCmpOEQ(u, C(1.0)), x, r);
          return Sel(b_.CreateFCmpOEQ(x, C(INFINITY)), x, r);
        }}},
      {"expm1",
       {1,
        [this](A a) {
          Value* x = a[0];
          Value* u = Exp(x);
          Value* um1 = Sub(u, C(1.0));
          Value* r = Div(Mul(um1, x), Log(u));
          r = Sel(b_.CreateFCmpOEQ(u, C(1.0)), x, r);
          r = Sel(b_.CreateFCmpOEQ(um1, C(-1.0)), C(-1.0), r);
          return Sel(b_.CreateFCmpOGT(x, C(700.0)), u, r);
        }}},
      {"tanh",
       {1,
        [this](A a) {
          Value* x = a[0];
          Value* ax = Abs(x);
          Value* e = Call("__nv_expm1", {Mul(ax, C(2.0))});
          Value* t = Div(e, Add(e, C(2.0)));
          t = Sel(b_.CreateFCmpOGT(ax, C(22.0)), C(1.0), t);
          return Copysign(t, x);
        }}},
      {"erf", {1, [this](A a) { return Erf(a[0]); }}},
      {"sin", {1, [this](A a) { return SinCos(a[0]).first; }}},
      {"cos", {1, [this](A a) { return SinCos(a[0]).second; }}},
      {"tan",
       {1,
        [this](A a) {
          auto [s, c] = SinCos(a[0]);
          return Div(s, c);
        }}},
      {"pow", {2, [this](A a) { return Pow(a[0], a[1]); }}},
      {"atan2", {2, [this](A a) { return Atan2(a[0], a[1]); }}},
      {"fmod", {2, [this](A a) { return Fmod(a[0], a[1]); }}},
      {"cbrt",
       {1,
        [this](A a) {
          Value* x = a[0];
          Value* ax = Abs(x);
          Value* r = Exp(Mul(Log(ax), C(1.0 / 3.0)));
          // One Newton step polishes the exp/log round trip.
          r = Sub(r, Div(Sub(Mul(Mul(r, r), r), ax), Mul(C(3.0), Mul(r, r))));
          r = Copysign(r, x);
          Value* special =
              b_.CreateOr(b_.CreateFCmpOEQ(ax, C(0.0)), b_.CreateFCmpUEQ(ax, C(INFINITY)));
          return Sel(special, x, r);
        }}},
      {"sqrt", un(llvm::Intrinsic::sqrt)},
      {"rsqrt", {1, [this](A a) { return Div(C(1.0), Un(llvm::Intrinsic::sqrt, a[0])); }}},
      {"fast_fdivide", {2, [this](A a) { return Div(a[0], a[1]); }}},
      {"fast_exp", {1, [this](A a) { return Exp(a[0]); }}},
      {"floor", un(llvm::Intrinsic::floor)},
      {"ceil", un(llvm::Intrinsic::ceil)},
      {"trunc", un(llvm::Intrinsic::trunc)},
      {"rint", un(llvm::Intrinsic::rint)},
      {"nearbyint", un(llvm::Intrinsic::rint)},
      {"fabs", un(llvm::Intrinsic::fabs)},
      {"round",
       {1,
        [this](A a) {
          Value* x = a[0];
          Value* t = Un(llvm::Intrinsic::trunc, x);
          Value* up = b_.CreateFCmpOGE(Abs(Sub(x, t)), C(0.5));
          return Sel(up, Add(t, Copysign(C(1.0), x)), t);
        }}},
  };
  return table_;
}

llvm::Function* MathBuilder::Get(const std::string& name) {
  if (name.rfind("__nv_", 0) != 0) return nullptr;
  std::string base = name.substr(5);
  bool is_float = false;
  const auto& table = Table();
  auto it = table.find(base);
  if (it == table.end() && !base.empty() && base.back() == 'f') {
    base.pop_back();
    it = table.find(base);
    is_float = true;
  }
  if (it == table.end()) return nullptr;
  llvm::Type* ty = is_float ? b_.getFloatTy() : b_.getDoubleTy();
  std::vector<llvm::Type*> params(it->second.arity, ty);
  auto* fty = llvm::FunctionType::get(ty, params, false);
  llvm::Function* fn = m_.getFunction(name);
  if (fn && !fn->isDeclaration()) return fn;
  if (fn && fn->getFunctionType() != fty) return nullptr;
  if (!fn) fn = llvm::Function::Create(fty, llvm::GlobalValue::InternalLinkage, name, m_);
  fn->setLinkage(llvm::GlobalValue::InternalLinkage);
  fn->setDoesNotAccessMemory();
  fn->setDoesNotThrow();
  // Callers (and recursive definitions) may be mid-emission: save the insertion point.
  llvm::IRBuilderBase::InsertPointGuard guard(b_);
  b_.SetInsertPoint(llvm::BasicBlock::Create(m_.getContext(), "entry", fn));
  std::vector<Value*> args;
  for (auto& arg : fn->args()) {
    args.push_back(is_float ? b_.CreateFPExt(&arg, b_.getDoubleTy()) : static_cast<Value*>(&arg));
  }
  Value* r = it->second.body(args);
  if (is_float) r = b_.CreateFPTrunc(r, b_.getFloatTy());
  b_.CreateRet(r);
  return fn;
}

}  // namespace

Status DefineFallbackMath(llvm::Module& m) {
  std::vector<std::string> wanted;
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() && f.getName().startswith("__nv_")) wanted.push_back(f.getName().str());
  }
  MathBuilder mb(m);
  for (const std::string& name : wanted) {
    if (!mb.Get(name)) {
      return Unimplemented("no built-in definition of '" + name +
                           "' for PTX-only mode (install libdevice)");
    }
  }
  return Status::Ok();
}

}  // namespace stitch::codegen
