// Polynomials in f32 as the math functions stitch defines itself evaluate them (trig.h,
// approximate_erf.h): Horner's rule, one fused multiply-add a coefficient.
//
// Thread-safety: acts on the builder it is given only.
#pragma once

#include <llvm/ADT/ArrayRef.h>
#include <llvm/IR/IRBuilder.h>

namespace stitch::codegen {

// Returns sum coefficients[i] * z^i for the f32 value `z`, each coefficient rounded to f32;
// `coefficients` is not empty.
llvm::Value* F32Polynomial(llvm::IRBuilder<>& b, llvm::Value* z,
                           llvm::ArrayRef<double> coefficients);

}  // namespace stitch::codegen
