// Sine, cosine and tangent of f32 values, emitted as stitch's own LLVM IR instead of calls to
// libdevice's __nv_sinf, __nv_cosf and __nv_tanf.
//
// libdevice reduces a large argument (Payne-Hanek) through an array it indexes by the
// argument's exponent, and an indexed array lives in local memory: every kernel that called
// those functions carried a stack frame and local loads and stores, which the static code
// checks reject (code_checks.h, "local"), and which the emulator never ran (it calls the
// host's libm for libdevice). These definitions pick the words of 2/pi with selects, so
// everything stays in registers, and they are plain IR, so the emulator runs the very code
// the GPU runs.
//
// Accuracy (tests/compiler/e2e/e2e_trig_test.cc measures it on the emulator against the
// double-precision libm, on 1.24 million arguments of every exponent and beside multiples of
// pi/2): within 2 ulp of the correctly rounded result for sin and cos (1.44 the largest seen)
// and within 3 ulp for tan (2.83); NaN for infinities and NaN; sin and tan keep the sign of
// zero.
//
// Thread-safety: acts on the builder it is given only.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace stitch::codegen {

enum class TrigFunction { kSin, kCos, kTan };

// Returns `fn` of the f32 value `x`, as a call to the builder's module's definition, which
// the call defines on first use (an internal, always-inlined function).
llvm::Value* EmitF32Trig(llvm::IRBuilder<>& b, TrigFunction fn, llvm::Value* x);

}  // namespace stitch::codegen
