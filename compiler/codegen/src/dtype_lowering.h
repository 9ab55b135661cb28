// How stitch dtypes are represented in LLVM IR, in memory and in registers.
//
// Storage types are what buffers hold (pred is one byte, bf16 is i16 bits). Compute types
// are what values are while a kernel works on them: pred is i1, every float narrower than
// f64 is `float`, f64 is `double`, integers are iN (signedness lives in the dtype, not the
// LLVM type).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <map>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/dtype.h"

namespace stitch::codegen {

// Returns the LLVM type one element occupies in a buffer.
llvm::Type* StorageType(llvm::LLVMContext& ctx, DType t);

// Returns the LLVM type a value of dtype `t` has in registers.
llvm::Type* ComputeType(llvm::LLVMContext& ctx, DType t);

// Loads element `index` of the buffer at `base` and widens it to the compute type.
llvm::Value* LoadElement(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* index);

// Loads element `index` of the buffer at `base` in its storage type, for WidenStored later:
// from `address` where given (that element's address, formed another way), else from
// `base` + `index`; aligned as `index` shows either way.
llvm::Value* LoadStored(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* index,
                        llvm::Value* address = nullptr);

// Widens `stored`, an element of dtype `t` in its storage type, to the compute type.
llvm::Value* WidenStored(llvm::IRBuilder<>& b, DType t, llvm::Value* stored);

// Narrows `value` (compute type) to storage and stores it at element `index` of `base`;
// f16 and bf16 round to nearest even.
void StoreElement(llvm::IRBuilder<>& b, DType t, llvm::Value* value, llvm::Value* base,
                  llvm::Value* index);

// Vectors of sub-word integer elements (i8 and i16 storage: pred, s8, u8 and bf16) are
// accessed as i32 words. LLVM 16's NVPTX backend splits a vector access of more than 4 such
// lanes into accesses of 4 lanes however well it is aligned (two ld.v4.b16 for 8 bf16, 8
// bytes each; f16's 8 lanes are the exception, as four <2 x half>), while <4 x i32> and
// <2 x i32> accesses keep their width. The words are never bitcast to a vector of the
// elements, which the backend's DAG combiner would fold back into the access it splits: lanes
// are shifted out of them and into them instead.
//
// Returns whether `t` is such a dtype.
bool AccessedAsWords(llvm::LLVMContext& ctx, DType t);

// One element of a buffer that an emitter accesses.
struct ElementAccess {
  DType dtype;
  llvm::Value* base;
  llvm::Value* index;
};

// Finds, among `accesses` (all in one block), the vectors to access as words: more than 4
// consecutive elements of one buffer of such a dtype (16 bytes, or 8 for i8) whose first
// index the index arithmetic proves aligned to the vector's size (ElementAlignment) and
// whose lanes it shows at constant distances 1, 2, ... from it (ConstantDistance). Returns
// each vector at the position of the earliest of its accesses: their positions in
// `accesses`, lane by lane. An element in no vector is accessed alone, as the alignment
// proof does not cover it.
std::map<size_t, std::vector<size_t>> PackedVectors(llvm::IRBuilder<>& b,
                                                    const std::vector<ElementAccess>& accesses);

// Loads the `lanes` elements from `first` on of the buffer at `base` (a vector PackedVectors
// found) as one access of i32 words and returns the words, for PackedLane.
llvm::Value* LoadPackedWords(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* first,
                             size_t lanes);

// Returns lane `lane` of `words` (as LoadPackedWords returns them) in the storage type of
// `t`, for WidenStored.
llvm::Value* PackedLane(llvm::IRBuilder<>& b, DType t, llvm::Value* words, size_t lane);

// Narrows `values` (compute type, lane by lane) to storage and stores them from element
// `first` of `base` on as one access of i32 words (a vector PackedVectors found).
void StorePackedVector(llvm::IRBuilder<>& b, DType t, const std::vector<llvm::Value*>& values,
                       llvm::Value* base, llvm::Value* first);

// One element StoreElements stores.
struct ElementStore {
  DType dtype;
  llvm::Value* value;  // compute type
  llvm::Value* base;
  llvm::Value* index;
};

// Stores each of `stores` as StoreElement does and in their order, except that the lanes of
// each vector PackedVectors finds among them are stored as one, where the earliest is.
void StoreElements(llvm::IRBuilder<>& b, const std::vector<ElementStore>& stores);

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
