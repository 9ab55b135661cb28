// The error function of f32 values as a quotient of two polynomials, for nodes whose values
// reach only f16 and bf16 outputs (CodegenOptions::approximate_math).
//
// libdevice's erff chooses between two polynomials by |x| with branches; ptxas predicates
// them, and each element then moves both coefficient sets into registers (suite row #11's
// GELU gradient took about 20 of its 49 instructions an element there). This form is
// straight-line: erf(x) = x P(x^2) / Q(x^2) for x clamped to [-kErfClamp, kErfClamp] (where
// erf rounds to 1 in f32), P of degree 6 and Q of degree 4 in x^2, coefficients fitted for
// the least largest relative error on [0, kErfClamp]. Evaluated in f32 with fused
// multiply-adds and an exact division, its relative error stays below 4e-7, about 7 f32 ulp
// of a result near 1 (tests/compiler/e2e/e2e_approximate_erf_test.cc measures it against the
// double-precision libm on 1.4 million arguments: 3.86e-7 the largest, at 3.64, where f32's
// rounding of the polynomials dominates); the caller's division (div.approx.ftz.f32) adds its 2
// ulp. NaN stays NaN, +-inf give +-erf(kErfClamp) (1 - 1.2e-7), and -0 stays -0; where erf is
// below the smallest normal f32 (|x| under 1.05e-38) the flush-to-zero division gives zero of
// x's sign.
//
// Thread-safety: acts on the builder it is given only.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace stitch::codegen {

// Beyond this |x|, erf(x) is 1 to f32 precision.
inline constexpr float kErfClamp = 3.925f;

// erf(x) = numerator / denominator for the f32 value `x`; the caller divides.
struct ErfQuotient {
  llvm::Value* numerator;
  llvm::Value* denominator;
};

// Emits the two polynomials of erf at the f32 value `x`.
ErfQuotient EmitErfQuotientF32(llvm::IRBuilder<>& b, llvm::Value* x);

}  // namespace stitch::codegen
