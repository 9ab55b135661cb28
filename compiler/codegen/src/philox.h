// Philox-4x32-10, the counter-based generator behind rng-uniform (SEMANTICS.md).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <cstdint>

namespace stitch::codegen {

// Returns the first output word (i32) of Philox-4x32-10 for key (seed low, seed high) and
// counter (index low, index high, stream, 0). `seed` and `index` are i64 values.
llvm::Value* EmitPhiloxWord0(llvm::IRBuilder<>& b, llvm::Value* seed, llvm::Value* index,
                             uint32_t stream);

}  // namespace stitch::codegen
