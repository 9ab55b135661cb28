#include "approximate_erf.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

#include <array>

#include "machine_functions.h"

namespace stitch::codegen {
namespace {

// Coefficients of z^0, z^1, ... (z = x^2), rounded to f32, as tools/fit_erf.py fits them.
// P(0) is 2 / sqrt(pi): erf(x) ~ x 2 / sqrt(pi) near 0.
constexpr std::array<float, 7> kNumerator = {0x1.20dd74p+0f, 0x1.87e522p-3f,  0x1.94b3fap-5f,
                                             0x1.b699d6p-9f, 0x1.193062p-13f, -0x1.04c586p-19f,
                                             0x1.5d51c8p-26f};
constexpr std::array<float, 5> kDenominator = {0x1p+0f, 0x1.017e48p-1f, 0x1.c8662ap-4f,
                                               0x1.be12f8p-7f, 0x1.c9a698p-11f};

// sum coefficients[i] * z^i, by Horner's rule with fused multiply-adds.
template <size_t N>
llvm::Value* Horner(llvm::IRBuilder<>& b, llvm::Value* z, const std::array<float, N>& c) {
  llvm::Type* f32 = b.getFloatTy();
  llvm::Value* acc = llvm::ConstantFP::get(f32, c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) {
    acc =
        b.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {acc, z, llvm::ConstantFP::get(f32, c[i])});
  }
  return acc;
}

}  // namespace

ErfQuotient EmitErfQuotientF32(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Type* f32 = b.getFloatTy();
  // NaN-propagating clamps: a NaN argument stays NaN through both.
  llvm::Value* clamped = FloatMax(b, FloatMin(b, x, llvm::ConstantFP::get(f32, kErfClamp)),
                                  llvm::ConstantFP::get(f32, -kErfClamp));
  llvm::Value* z = b.CreateFMul(clamped, clamped);
  return {b.CreateFMul(clamped, Horner(b, z, kNumerator)), Horner(b, z, kDenominator)};
}

}  // namespace stitch::codegen
