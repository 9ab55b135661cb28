// Calls to the portable IR's machine functions (llvm_pipeline.h): operations that are one
// instruction on some GPUs and a sequence on others. Each call declares its function in the
// builder's module on first use; LowerToPtx and the emulator give it a body
// (DefineMachineFunctions).
//
// Thread-safety: the functions act on the builder they are given only.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace stitch::codegen {

// The bf16 bits (i16) of f32 `value`, rounded to nearest even (kBf16RoundingFunction).
llvm::Value* EmitBf16Rounding(llvm::IRBuilder<>& b, llvm::Value* value);

// Float max and min that return NaN when either operand is NaN: for f32 a call to
// kF32MaxFunction or kF32MinFunction; for f64 the compares and selects those functions'
// bodies use before sm_80 and on the host.
llvm::Value* FloatMax(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);
llvm::Value* FloatMin(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);

// Asks the GPU to bring the line of `address`, in a global buffer, into L2
// (kL2PrefetchFunction); the emulator does nothing.
void EmitL2Prefetch(llvm::IRBuilder<>& b, llvm::Value* address);

}  // namespace stitch::codegen
