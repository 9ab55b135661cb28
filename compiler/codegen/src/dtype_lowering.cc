#include "dtype_lowering.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PatternMatch.h>

#include <algorithm>
#include <map>
#include <optional>

#include "index_alignment.h"
#include "machine_functions.h"

namespace stitch::codegen {

llvm::Type* StorageType(llvm::LLVMContext& ctx, DType t) {
  switch (t) {
    case DType::kPred:
    case DType::kS8:
    case DType::kU8:
      return llvm::Type::getInt8Ty(ctx);
    case DType::kS32:
    case DType::kU32:
      return llvm::Type::getInt32Ty(ctx);
    case DType::kS64:
    case DType::kU64:
      return llvm::Type::getInt64Ty(ctx);
    case DType::kF16:
      return llvm::Type::getHalfTy(ctx);
    case DType::kBF16:
      return llvm::Type::getInt16Ty(ctx);
    case DType::kF32:
      return llvm::Type::getFloatTy(ctx);
    case DType::kF64:
      return llvm::Type::getDoubleTy(ctx);
  }
  return llvm::Type::getInt8Ty(ctx);
}

llvm::Type* ComputeType(llvm::LLVMContext& ctx, DType t) {
  switch (t) {
    case DType::kPred:
      return llvm::Type::getInt1Ty(ctx);
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
      return llvm::Type::getFloatTy(ctx);
    default:
      return StorageType(ctx, t);
  }
}

namespace {

// The widest global access, and the most lanes of i8 or i16 that NVPTX puts in one vector
// access (ld.v4.b16, ld.v4.u8).
constexpr uint64_t kMaxPackedBytes = 16;
constexpr uint64_t kMaxSubwordLanes = 4;

// bf16 bits -> float: the bf16 pattern is the upper half of the f32 pattern.
llvm::Value* Bf16BitsToFloat(llvm::IRBuilder<>& b, llvm::Value* bits16) {
  llvm::Value* wide = b.CreateShl(b.CreateZExt(bits16, b.getInt32Ty()), 16);
  return b.CreateBitCast(wide, b.getFloatTy());
}

// The bf16 bits `f` was widened from by Bf16BitsToFloat, or null: a value rounded to bf16
// already (a convert to bf16, or a bf16 load) is stored as its bits, not rounded again, which
// the optimiser cannot see through the rounding call.
llvm::Value* Bf16BitsOf(llvm::Value* f) {
  using namespace llvm::PatternMatch;
  llvm::Value* bits = nullptr;
  if (match(f, m_BitCast(m_Shl(m_ZExt(m_Value(bits)), m_SpecificInt(16)))) &&
      bits->getType()->isIntegerTy(16)) {
    return bits;
  }
  return nullptr;
}

// The alignment the index arithmetic proves, so that the lanes of a vector, whose first
// index is a multiple of the width, can be merged into one wide access.
llvm::Align ElementAlign(llvm::IRBuilder<>& b, llvm::Type* storage, llvm::Value* index) {
  const llvm::DataLayout& layout = b.GetInsertBlock()->getModule()->getDataLayout();
  return llvm::Align(ElementAlignment(index, layout.getTypeStoreSize(storage)));
}

// A compute-type `value` narrowed to the storage type.
llvm::Value* Narrow(llvm::IRBuilder<>& b, DType t, llvm::Value* value) {
  switch (t) {
    case DType::kPred:
      return b.CreateZExt(value, b.getInt8Ty());
    case DType::kF16:
      return b.CreateFPTrunc(value, b.getHalfTy());
    case DType::kBF16:
      return Bf16BitsOf(value) ? Bf16BitsOf(value) : EmitBf16Rounding(b, value);
    default:
      return value;
  }
}

// How many bits of an i32 word one element of a word-packed dtype takes.
unsigned StorageBits(llvm::IRBuilder<>& b, DType t) {
  return StorageType(b.getContext(), t)->getIntegerBitWidth();
}

}  // namespace

llvm::Value* LoadElement(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* index) {
  return WidenStored(b, t, LoadStored(b, t, base, index));
}

llvm::Value* LoadStored(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* index,
                        llvm::Value* address) {
  llvm::Type* st = StorageType(b.getContext(), t);
  llvm::Value* addr = address != nullptr ? address : b.CreateInBoundsGEP(st, base, index);
  return b.CreateAlignedLoad(st, addr, ElementAlign(b, st, index));
}

llvm::Value* WidenStored(llvm::IRBuilder<>& b, DType t, llvm::Value* stored) {
  switch (t) {
    case DType::kPred:
      return b.CreateICmpNE(stored, b.getInt8(0));
    case DType::kF16:
      return b.CreateFPExt(stored, b.getFloatTy());
    case DType::kBF16:
      return Bf16BitsToFloat(b, stored);
    default:
      return stored;
  }
}

void StoreElement(llvm::IRBuilder<>& b, DType t, llvm::Value* value, llvm::Value* base,
                  llvm::Value* index) {
  llvm::Type* st = StorageType(b.getContext(), t);
  b.CreateAlignedStore(Narrow(b, t, value), b.CreateInBoundsGEP(st, base, index),
                       ElementAlign(b, st, index));
}

bool AccessedAsWords(llvm::LLVMContext& ctx, DType t) {
  llvm::Type* st = StorageType(ctx, t);
  return st->isIntegerTy() && st->getIntegerBitWidth() < 32;
}

std::map<size_t, std::vector<size_t>> PackedVectors(llvm::IRBuilder<>& b,
                                                    const std::vector<ElementAccess>& accesses) {
  std::map<std::pair<llvm::Value*, DType>, std::vector<size_t>> by_buffer;
  for (size_t i = 0; i < accesses.size(); ++i) {
    const ElementAccess& a = accesses[i];
    if (AccessedAsWords(b.getContext(), a.dtype)) by_buffer[{a.base, a.dtype}].push_back(i);
  }
  std::map<size_t, std::vector<size_t>> vectors;
  std::vector<bool> taken(accesses.size(), false);
  for (const auto& [buffer, at] : by_buffer) {
    const uint64_t bytes = StorageBits(b, buffer.second) / 8;
    // The widest vectors first: 16 bytes, then 8 (i8 only; 4 lanes of i16 are 8 bytes already).
    for (uint64_t lanes = kMaxPackedBytes / bytes; lanes > kMaxSubwordLanes; lanes /= 2) {
      for (size_t first : at) {
        llvm::Value* index = accesses[first].index;
        if (taken[first] || ElementAlignment(index, bytes) < lanes * bytes) continue;
        std::vector<size_t> lane_at = {first};
        for (uint64_t e = 1; e < lanes && lane_at.size() == e; ++e) {
          for (size_t j : at) {
            if (!taken[j] &&
                ConstantDistance(accesses[j].index, index) == static_cast<int64_t>(e)) {
              lane_at.push_back(j);
              break;
            }
          }
        }
        if (lane_at.size() != lanes) continue;
        for (size_t j : lane_at) taken[j] = true;
        const size_t earliest = *std::min_element(lane_at.begin(), lane_at.end());
        vectors[earliest] = std::move(lane_at);
      }
    }
  }
  return vectors;
}

llvm::Value* LoadPackedWords(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* first,
                             size_t lanes) {
  llvm::Type* st = StorageType(b.getContext(), t);
  const size_t per_word = 32 / StorageBits(b, t);
  auto* vector_ty =
      llvm::FixedVectorType::get(b.getInt32Ty(), static_cast<unsigned>(lanes / per_word));
  return b.CreateAlignedLoad(vector_ty, b.CreateInBoundsGEP(st, base, first),
                             ElementAlign(b, st, first));
}

llvm::Value* PackedLane(llvm::IRBuilder<>& b, DType t, llvm::Value* words, size_t lane) {
  const unsigned bits = StorageBits(b, t);
  const size_t per_word = 32 / bits;
  const unsigned shift = static_cast<unsigned>(lane % per_word) * bits;
  llvm::Value* word =
      b.CreateExtractElement(words, b.getInt32(static_cast<uint32_t>(lane / per_word)));
  if (shift > 0) word = b.CreateLShr(word, shift);
  return b.CreateTrunc(word, StorageType(b.getContext(), t));
}

void StorePackedVector(llvm::IRBuilder<>& b, DType t, const std::vector<llvm::Value*>& values,
                       llvm::Value* base, llvm::Value* first) {
  llvm::Type* st = StorageType(b.getContext(), t);
  const unsigned bits = StorageBits(b, t);
  const size_t per_word = 32 / bits;
  const size_t count = values.size() / per_word;
  llvm::Value* words = llvm::PoisonValue::get(
      llvm::FixedVectorType::get(b.getInt32Ty(), static_cast<unsigned>(count)));
  for (size_t w = 0; w < count; ++w) {
    llvm::Value* word = nullptr;
    for (size_t k = 0; k < per_word; ++k) {
      llvm::Value* lane = b.CreateZExt(Narrow(b, t, values[w * per_word + k]), b.getInt32Ty());
      if (k > 0) lane = b.CreateShl(lane, static_cast<uint64_t>(k * bits));
      word = word ? b.CreateOr(word, lane) : lane;
    }
    words = b.CreateInsertElement(words, word, b.getInt32(static_cast<uint32_t>(w)));
  }
  b.CreateAlignedStore(words, b.CreateInBoundsGEP(st, base, first), ElementAlign(b, st, first));
}

void StoreElements(llvm::IRBuilder<>& b, const std::vector<ElementStore>& stores) {
  std::vector<ElementAccess> accesses;
  for (const ElementStore& s : stores) accesses.push_back({s.dtype, s.base, s.index});
  const std::map<size_t, std::vector<size_t>> vectors = PackedVectors(b, accesses);
  std::vector<bool> in_vector(stores.size(), false);
  for (const auto& [earliest, lanes] : vectors) {
    for (size_t k : lanes) in_vector[k] = true;
  }
  for (size_t i = 0; i < stores.size(); ++i) {
    const ElementStore& s = stores[i];
    if (auto v = vectors.find(i); v != vectors.end()) {
      std::vector<llvm::Value*> values;
      for (size_t k : v->second) values.push_back(stores[k].value);
      StorePackedVector(b, s.dtype, values, s.base, stores[v->second[0]].index);
    } else if (!in_vector[i]) {
      StoreElement(b, s.dtype, s.value, s.base, s.index);
    }
  }
}

llvm::Value* RoundFloatTo(llvm::IRBuilder<>& b, llvm::Value* value, DType t) {
  switch (t) {
    case DType::kF16:
      // fptrunc from double to half rounds once, so go straight to half from either width.
      return b.CreateFPExt(b.CreateFPTrunc(value, b.getHalfTy()), b.getFloatTy());
    case DType::kBF16: {
      llvm::Value* f =
          value->getType()->isDoubleTy() ? b.CreateFPTrunc(value, b.getFloatTy()) : value;
      return Bf16BitsToFloat(b, EmitBf16Rounding(b, f));
    }
    case DType::kF32:
      return value->getType()->isDoubleTy() ? b.CreateFPTrunc(value, b.getFloatTy()) : value;
    case DType::kF64:
      return value->getType()->isFloatTy() ? b.CreateFPExt(value, b.getDoubleTy()) : value;
    default:
      return value;
  }
}

llvm::Value* ConvertValue(llvm::IRBuilder<>& b, llvm::Value* value, DType from, DType to) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Type* to_ty = ComputeType(ctx, to);
  if (from == to) return value;
  if (to == DType::kPred) {
    if (IsFloat(from)) {
      // Unordered: NaN != 0 is true, as in C.
      return b.CreateFCmpUNE(value, llvm::ConstantFP::get(value->getType(), 0.0));
    }
    return b.CreateICmpNE(value, llvm::ConstantInt::get(value->getType(), 0));
  }
  if (IsFloat(from) && IsFloat(to)) return RoundFloatTo(b, value, to);
  if (IsFloat(from)) {
    // Saturating conversion also maps NaN to 0, which is what SEMANTICS.md asks for.
    llvm::Intrinsic::ID id =
        IsSignedInt(to) ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
    return b.CreateIntrinsic(id, {to_ty, value->getType()}, {value});
  }
  if (IsFloat(to)) {
    llvm::Type* wide = to == DType::kF64 ? b.getDoubleTy() : b.getFloatTy();
    llvm::Value* f = IsSignedInt(from) ? b.CreateSIToFP(value, wide) : b.CreateUIToFP(value, wide);
    return RoundFloatTo(b, f, to);
  }
  // Integer to integer: keep the low bits, extend by the source's signedness.
  return IsSignedInt(from) ? b.CreateSExtOrTrunc(value, to_ty) : b.CreateZExtOrTrunc(value, to_ty);
}

llvm::Value* BitcastValue(llvm::IRBuilder<>& b, llvm::Value* value, DType from, DType to) {
  if (DTypeBytes(from) != DTypeBytes(to) || from == DType::kPred || to == DType::kPred) {
    return nullptr;
  }
  if (from == to) return value;
  if (from == DType::kF16 || from == DType::kBF16 || to == DType::kF16 || to == DType::kBF16) {
    // 16-bit floats have no same-width partner among stitch's integer dtypes except each
    // other; go through the storage bits.
    llvm::Value* bits = nullptr;
    if (from == DType::kF16) {
      bits = b.CreateBitCast(b.CreateFPTrunc(value, b.getHalfTy()), b.getInt16Ty());
    } else {
      bits = EmitBf16Rounding(b, value);
    }
    if (to == DType::kF16)
      return b.CreateFPExt(b.CreateBitCast(bits, b.getHalfTy()), b.getFloatTy());
    return Bf16BitsToFloat(b, bits);
  }
  return b.CreateBitCast(value, ComputeType(b.getContext(), to));
}

llvm::Constant* FloatConstant(llvm::LLVMContext& ctx, DType t, double v) {
  llvm::APFloat ap(v);
  bool lost = false;
  if (t == DType::kF16) {
    ap.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven, &lost);
  } else if (t == DType::kBF16) {
    ap.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven, &lost);
  }
  llvm::Type* ty = ComputeType(ctx, t);
  const llvm::fltSemantics& sem =
      ty->isDoubleTy() ? llvm::APFloat::IEEEdouble() : llvm::APFloat::IEEEsingle();
  ap.convert(sem, llvm::APFloat::rmNearestTiesToEven, &lost);
  return llvm::ConstantFP::get(ctx, ap);
}

llvm::Constant* IntConstant(llvm::LLVMContext& ctx, DType t, int64_t bits) {
  llvm::Type* ty = ComputeType(ctx, t);
  if (t == DType::kPred) return llvm::ConstantInt::get(ty, bits != 0 ? 1 : 0);
  return llvm::ConstantInt::get(ty, static_cast<uint64_t>(bits), /*isSigned=*/false);
}

}  // namespace stitch::codegen
