// How stitch dtypes are represented in LLVM IR, in memory and in registers.
//
// Storage types are what buffers hold (pred is one byte, bf16 is i16 bits). Compute types
// are what values are while a kernel works on them: pred is i1, every float narrower than
// f64 is `float`, f64 is `double`, integers are iN (signedness lives in the dtype, not the
// LLVM type).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "stitch/base/status.h"
#include "stitch/ir/dtype.h"

namespace stitch::codegen {

// Returns the LLVM type one element occupies in a buffer.
llvm::Type* StorageType(llvm::LLVMContext& ctx, DType t);

// Returns the LLVM type a value of dtype `t` has in registers.
llvm::Type* ComputeType(llvm::LLVMContext& ctx, DType t);

// Loads element `index` of the buffer at `base` and widens it to the compute type.
llvm::Value* LoadElement(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* index);

// Narrows `value` (compute type) to storage and stores it at element `index` of `base`;
// f16 and bf16 round to nearest even.
void StoreElement(llvm::IRBuilder<>& b, DType t, llvm::Value* value, llvm::Value* base,
                  llvm::Value* index);

// Rounds a compute-type float `value` to the precision of `t` (f16, bf16) and returns it in
// t's compute type; for other float dtypes it only changes the LLVM width if needed.
llvm::Value* RoundFloatTo(llvm::IRBuilder<>& b, llvm::Value* value, DType t);

// Converts `value` of dtype `from` to dtype `to` following SEMANTICS.md `convert`.
llvm::Value* ConvertValue(llvm::IRBuilder<>& b, llvm::Value* value, DType from, DType to);

// Reinterprets the bits of `value` (same element width). Returns nullptr when the widths
// differ or the pair is not one SEMANTICS.md allows.
llvm::Value* BitcastValue(llvm::IRBuilder<>& b, llvm::Value* value, DType from, DType to);

// Returns a compute-type constant of dtype `t` holding `v` (floats) or `bits` (integers).
llvm::Constant* FloatConstant(llvm::LLVMContext& ctx, DType t, double v);
llvm::Constant* IntConstant(llvm::LLVMContext& ctx, DType t, int64_t bits);

}  // namespace stitch::codegen
