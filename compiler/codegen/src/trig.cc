#include "trig.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "f32_polynomial.h"

namespace stitch::codegen {
namespace {

using llvm::Value;

// Arguments of smaller magnitude reduce by Cody and Waite's method: pi/2 in three f32 parts,
// each multiple subtracted with one FMA. The quadrant count j is then below 2^17 and the first
// subtraction exact (where j is not 0, x and j times the first part are multiples of 2^-24
// and differ by less than 1), so the reduced argument keeps f32 precision. Larger arguments
// reduce by Payne and Hanek's.
constexpr float kCodyWaiteLimit = 0x1p17f;
constexpr float kTwoOverPi = 0x1.45f306p-1f;
// pi/2 = kHalfPi0 + kHalfPi1 + kHalfPi2 to within 1.1e-23.
constexpr float kHalfPi0 = 0x1.921fb6p+0f;
constexpr float kHalfPi1 = -0x1.777a5cp-25f;
constexpr float kHalfPi2 = -0x1.ee59dap-50f;
// The first 224 bits of 2/pi after the binary point, most significant word first. For a
// finite f32 the 62 fraction bits the reduction reads lie more than 30 bits above those the
// truncation of 2/pi can reach.
constexpr std::array<uint32_t, 7> kTwoOverPiBits = {0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0,
                                                    0xdb629599, 0x3c439041, 0xfe5163ab};
// pi/2 * 2^-62 in two f32 parts: turns a quadrant fraction held in an i64 (scaled by 2^62)
// into radians.
constexpr float kHalfPiOver2To62Hi = 0x1.921fb6p-62f;
constexpr float kHalfPiOver2To62Lo = -0x1.777a5cp-87f;
// Taylor coefficients of sin(r)/r - 1 and cos(r) - 1 in z = r^2. On |r| <= pi/4 the first
// terms left out (r^11/11! and r^12/12!) are below 2.5e-9 and 1.2e-10 of the result, under a
// tenth of an f32 ulp.
const std::vector<double> kSinCoefficients = {-1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880};
const std::vector<double> kCosCoefficients = {-1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320,
                                              -1.0 / 3628800};

// x = quadrant * pi/2 + r with |r| <= pi/4 (a little more where x * 2/pi rounds across a
// half); quadrant is an i32 whose low two bits are exact.
struct Reduced {
  Value* r;
  Value* quadrant;
};

Value* F32(llvm::IRBuilder<>& b, double v) {
  return llvm::ConstantFP::get(b.getFloatTy(), static_cast<float>(v));
}

Value* Fma(llvm::IRBuilder<>& b, Value* x, Value* y, Value* z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {b.getFloatTy()}, {x, y, z});
}

// For |x| < kCodyWaiteLimit.
Reduced CodyWaite(llvm::IRBuilder<>& b, Value* x) {
  Value* j = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(x, F32(b, kTwoOverPi)));
  Value* minus_j = b.CreateFNeg(j);
  Value* r = Fma(b, minus_j, F32(b, kHalfPi0), x);
  r = Fma(b, minus_j, F32(b, kHalfPi1), r);
  r = Fma(b, minus_j, F32(b, kHalfPi2), r);
  return {r, b.CreateFPToSI(j, b.getInt32Ty())};
}

// For |x| >= kCodyWaiteLimit, infinities and NaN (whose r is NaN). |x| = m * 2^(e - 150) for
// the 24-bit significand m and the biased exponent e, so |x| * 2/pi is the integer
// m * (2/pi * 2^224) scaled by 2^(e - 374): the product's bit 374 - e is the units bit. Only
// the two bits above it (the quadrant mod 4) and the fraction below it matter, so the 64 bits
// from bit 312 - e up are taken from the product's eight words with selects. libdevice indexes
// an array by e here, and an indexed array lives in local memory.
Reduced PayneHanek(llvm::IRBuilder<>& b, Value* x) {
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Type* i64 = b.getInt64Ty();
  Value* bits = b.CreateBitCast(x, i32);
  Value* biased_exponent = b.CreateAnd(b.CreateLShr(bits, 23), 255);
  Value* significand = b.CreateZExt(b.CreateOr(b.CreateAnd(bits, 0x7fffff), 0x800000), i64);
  std::array<Value*, 8> product;  // least significant word first
  Value* carry = b.getInt64(0);
  for (size_t i = 0; i < kTwoOverPiBits.size(); ++i) {
    Value* word = b.getInt64(kTwoOverPiBits[kTwoOverPiBits.size() - 1 - i]);
    Value* t = b.CreateAdd(b.CreateMul(significand, word), carry);
    product[i] = b.CreateTrunc(t, i32);
    carry = b.CreateLShr(t, 32);
  }
  product[7] = b.CreateTrunc(carry, i32);
  // Here e is in [144, 255], so the window starts at bit 57 to 168: in word 1 to 5.
  static_assert(kCodyWaiteLimit >= 0x1p17f, "the window's first word must stay within 1..5");
  Value* start = b.CreateSub(b.getInt32(312), biased_exponent);
  Value* first_word = b.CreateLShr(start, 5);
  Value* shift = b.CreateAnd(start, 31);
  auto word_at = [&](int k) {  // product[first_word + k]
    Value* v = product[1 + k];
    for (int w = 2; w <= 5; ++w) {
      v = b.CreateSelect(b.CreateICmpEQ(first_word, b.getInt32(w)), product[w + k], v);
    }
    return v;
  };
  Value* w0 = word_at(0);
  Value* w1 = word_at(1);
  Value* w2 = word_at(2);
  Value* low_word = b.CreateIntrinsic(llvm::Intrinsic::fshr, {i32}, {w1, w0, shift});
  Value* high_word = b.CreateIntrinsic(llvm::Intrinsic::fshr, {i32}, {w2, w1, shift});
  Value* window =
      b.CreateOr(b.CreateShl(b.CreateZExt(high_word, i64), 32), b.CreateZExt(low_word, i64));
  // The fraction of a quadrant, read as signed, is rounded to the nearest quadrant: a
  // fraction of a half or more counts one quadrant more and is negative.
  Value* fraction = b.CreateShl(window, 2);
  Value* quadrant = b.CreateTrunc(b.CreateLShr(window, 62), i32);
  quadrant = b.CreateAdd(quadrant, b.CreateZExt(b.CreateICmpSLT(fraction, b.getInt64(0)), i32));
  // In f32 as hi + lo: the fraction rounded, and what the rounding left (exact in i64, as
  // |fraction| <= 2^61 after the shift), so r takes one rounding, not three.
  fraction = b.CreateAShr(fraction, 2);
  Value* hi = b.CreateSIToFP(fraction, b.getFloatTy());
  Value* lo = b.CreateSIToFP(b.CreateSub(fraction, b.CreateFPToSI(hi, i64)), b.getFloatTy());
  Value* r =
      Fma(b, hi, F32(b, kHalfPiOver2To62Hi),
          Fma(b, hi, F32(b, kHalfPiOver2To62Lo), b.CreateFMul(lo, F32(b, kHalfPiOver2To62Hi))));
  // That reduced |x|; x = -|x| reduces to -quadrant and -r.
  Value* negative = b.CreateICmpSLT(bits, b.getInt32(0));
  r = b.CreateSelect(negative, b.CreateFNeg(r), r);
  quadrant = b.CreateSelect(negative, b.CreateNeg(quadrant), quadrant);
  Value* finite = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x),
                                  F32(b, std::numeric_limits<float>::infinity()));
  r = b.CreateSelect(finite, r, F32(b, std::numeric_limits<float>::quiet_NaN()));
  return {r, quadrant};
}

const char* FunctionName(TrigFunction fn) {
  switch (fn) {
    case TrigFunction::kSin:
      return "stitch_sinf";
    case TrigFunction::kCos:
      return "stitch_cosf";
    case TrigFunction::kTan:
      return "stitch_tanf";
  }
  return "stitch_sinf";
}

// fn(quadrant * pi/2 + r) from sin(r) and cos(r).
Value* FromQuadrant(llvm::IRBuilder<>& b, TrigFunction fn, Value* quadrant, Value* sin_r,
                    Value* cos_r) {
  auto bit = [&](Value* n, int mask) {
    return b.CreateICmpNE(b.CreateAnd(n, mask), b.getInt32(0));
  };
  if (fn == TrigFunction::kTan) {
    // tan(r + pi/2) = -cos(r) / sin(r).
    Value* odd = bit(quadrant, 1);
    return b.CreateFDiv(b.CreateSelect(odd, b.CreateFNeg(cos_r), sin_r),
                        b.CreateSelect(odd, sin_r, cos_r));
  }
  // cos(x) = sin(x + pi/2); sin(r + pi/2) = cos(r); sin(r + pi) = -sin(r).
  Value* n = fn == TrigFunction::kCos ? b.CreateAdd(quadrant, b.getInt32(1)) : quadrant;
  Value* v = b.CreateSelect(bit(n, 1), cos_r, sin_r);
  return b.CreateSelect(bit(n, 2), b.CreateFNeg(v), v);
}

llvm::Function* Define(llvm::Module& m, TrigFunction fn) {
  const char* name = FunctionName(fn);
  if (llvm::Function* existing = m.getFunction(name)) return existing;
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* f32 = llvm::Type::getFloatTy(ctx);
  llvm::Function* f = llvm::Function::Create(llvm::FunctionType::get(f32, {f32}, false),
                                             llvm::GlobalValue::InternalLinkage, name, m);
  f->addFnAttr(llvm::Attribute::AlwaysInline);
  f->setDoesNotAccessMemory();
  f->setDoesNotThrow();
  f->setWillReturn();
  f->addFnAttr(llvm::Attribute::NoSync);
  f->addFnAttr(llvm::Attribute::NoFree);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto* near = llvm::BasicBlock::Create(ctx, "cody_waite", f);
  auto* far = llvm::BasicBlock::Create(ctx, "payne_hanek", f);
  auto* join = llvm::BasicBlock::Create(ctx, "polynomial", f);
  llvm::IRBuilder<> b(entry);
  Value* x = f->getArg(0);
  // False for NaN, which reduces with the far arguments.
  Value* is_near =
      b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), F32(b, kCodyWaiteLimit));
  b.CreateCondBr(is_near, near, far);
  b.SetInsertPoint(near);
  const Reduced a = CodyWaite(b, x);
  b.CreateBr(join);
  b.SetInsertPoint(far);
  const Reduced c = PayneHanek(b, x);
  b.CreateBr(join);
  b.SetInsertPoint(join);
  llvm::PHINode* r = b.CreatePHI(f32, 2);
  r->addIncoming(a.r, near);
  r->addIncoming(c.r, far);
  llvm::PHINode* quadrant = b.CreatePHI(b.getInt32Ty(), 2);
  quadrant->addIncoming(a.quadrant, near);
  quadrant->addIncoming(c.quadrant, far);
  Value* z = b.CreateFMul(r, r);
  Value* sin_r = Fma(b, b.CreateFMul(r, z), F32Polynomial(b, z, kSinCoefficients), r);
  Value* cos_r = Fma(b, z, F32Polynomial(b, z, kCosCoefficients), F32(b, 1.0));
  Value* v = FromQuadrant(b, fn, quadrant, sin_r, cos_r);
  // The reduction loses the sign of a zero, which sin and tan keep.
  if (fn != TrigFunction::kCos) v = b.CreateSelect(b.CreateFCmpOEQ(x, F32(b, 0.0)), x, v);
  b.CreateRet(v);
  return f;
}

}  // namespace

llvm::Value* EmitF32Trig(llvm::IRBuilder<>& b, TrigFunction fn, llvm::Value* x) {
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  return b.CreateCall(Define(m, fn), {x});
}

}  // namespace stitch::codegen
