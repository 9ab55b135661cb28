#include "f32_polynomial.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

namespace stitch::codegen {

llvm::Value* F32Polynomial(llvm::IRBuilder<>& b, llvm::Value* z,
                           llvm::ArrayRef<double> coefficients) {
  llvm::Type* f32 = b.getFloatTy();
  auto constant = [&](double v) { return llvm::ConstantFP::get(f32, static_cast<float>(v)); };
  llvm::Value* acc = constant(coefficients.back());
  for (size_t i = coefficients.size() - 1; i-- > 0;) {
    acc = b.CreateIntrinsic(llvm::Intrinsic::fma, {f32}, {acc, z, constant(coefficients[i])});
  }
  return acc;
}

}  // namespace stitch::codegen
