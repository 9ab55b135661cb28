// What the emitters know about the alignment of an element index, read off the index
// arithmetic they built.
//
// LLVM's own known-bits analysis cannot see through a remainder by a constant that is not a
// power of two (`lin % 768`, how every broadcast and delinearized index is formed), so the
// loads of a vector's lanes would keep their element alignment and the backend's load/store
// vectorizer would not merge them. This analysis tracks only trailing zero bits, which
// survive such remainders: x % c keeps min(tz(x), tz(c)).
#pragma once

#include <llvm/IR/Value.h>

#include <cstdint>
#include <optional>

namespace stitch::codegen {

// Returns how many low bits of the integer `index` are known to be zero (at most 63; 63 for
// the constant 0). Sound for the wrapping arithmetic of the IR: every rule holds modulo 2^n.
int KnownTrailingZeros(const llvm::Value* index);

// Returns the alignment in bytes of element `index` of a buffer of `element_bytes`-byte
// elements whose base is 16-byte aligned (CompiledKernel::param_nodes' contract): the
// element size times the largest power of two known to divide the index, at most 16.
uint64_t ElementAlignment(const llvm::Value* index, uint64_t element_bytes);

// Returns a - b for two integer indices when their arithmetic shows it constant: both
// constants, or the same value plus constants, or sums sharing an operand whose other
// operands are so, through adds that do not wrap (nsw). Otherwise nothing.
std::optional<int64_t> ConstantDistance(const llvm::Value* a, const llvm::Value* b);

}  // namespace stitch::codegen
