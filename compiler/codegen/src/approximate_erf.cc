#include "approximate_erf.h"

#include <llvm/IR/Constants.h>

#include <array>

#include "f32_polynomial.h"
#include "machine_functions.h"

namespace stitch::codegen {
namespace {

// Coefficients of z^0, z^1, ... (z = x^2), f32 values, as tools/fit_erf.py fits them.
// P(0) is 2 / sqrt(pi): erf(x) ~ x 2 / sqrt(pi) near 0.
constexpr std::array<double, 7> kNumerator = {0x1.20dd74p+0, 0x1.87e522p-3,  0x1.94b3fap-5,
                                              0x1.b699d6p-9, 0x1.193062p-13, -0x1.04c586p-19,
                                              0x1.5d51c8p-26};
constexpr std::array<double, 5> kDenominator = {0x1p+0, 0x1.017e48p-1, 0x1.c8662ap-4, 0x1.be12f8p-7,
                                                0x1.c9a698p-11};

}  // namespace

ErfQuotient EmitErfQuotientF32(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Type* f32 = b.getFloatTy();
  // NaN-propagating clamps: a NaN argument stays NaN through both.
  llvm::Value* clamped = FloatMax(b, FloatMin(b, x, llvm::ConstantFP::get(f32, kErfClamp)),
                                  llvm::ConstantFP::get(f32, -kErfClamp));
  llvm::Value* z = b.CreateFMul(clamped, clamped);
  return {b.CreateFMul(clamped, F32Polynomial(b, z, kNumerator)),
          F32Polynomial(b, z, kDenominator)};
}

}  // namespace stitch::codegen
