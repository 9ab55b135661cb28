// Philox-4x32-10, the counter-based generator behind rng-uniform (SEMANTICS.md).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <cstdint>

namespace stitch::codegen {

// Returns word `word` (an i32 in 0..3) of Philox-4x32-10 for key (seed low, seed high) and
// counter (block low, block high, stream, 0): rng-uniform's bits at linear index
// 4 * block + word (stitch/ir/philox.h). `seed` and `block` are i64 values. Callers that give
// four indices one block value get one evaluation from LLVM's common-subexpression
// elimination.
llvm::Value* EmitPhiloxWord(llvm::IRBuilder<>& b, llvm::Value* seed, llvm::Value* block,
                            llvm::Value* word, uint32_t stream);

}  // namespace stitch::codegen
