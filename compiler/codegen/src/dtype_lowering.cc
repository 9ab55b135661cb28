#include "dtype_lowering.h"

#include <llvm/ADT/APFloat.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include "index_alignment.h"

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

// bf16 bits -> float: the bf16 pattern is the upper half of the f32 pattern.
llvm::Value* Bf16BitsToFloat(llvm::IRBuilder<>& b, llvm::Value* bits16) {
  llvm::Value* wide = b.CreateShl(b.CreateZExt(bits16, b.getInt32Ty()), 16);
  return b.CreateBitCast(wide, b.getFloatTy());
}

// float -> bf16 bits, rounding to nearest even; NaN becomes a quiet NaN of the same sign.
llvm::Value* FloatToBf16Bits(llvm::IRBuilder<>& b, llvm::Value* f) {
  llvm::Value* bits = b.CreateBitCast(f, b.getInt32Ty());
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value* rounded = b.CreateAdd(bits, b.CreateAdd(lsb, b.getInt32(0x7fff)));
  llvm::Value* is_nan = b.CreateFCmpUNO(f, f);
  llvm::Value* nan_bits = b.CreateOr(bits, b.getInt32(0x00400000));
  llvm::Value* chosen = b.CreateSelect(is_nan, nan_bits, rounded);
  return b.CreateTrunc(b.CreateLShr(chosen, 16), b.getInt16Ty());
}

// The alignment the index arithmetic proves, so that the lanes of a vector, whose first
// index is a multiple of the width, can be merged into one wide access.
llvm::Align ElementAlign(llvm::IRBuilder<>& b, llvm::Type* storage, llvm::Value* index) {
  const llvm::DataLayout& layout = b.GetInsertBlock()->getModule()->getDataLayout();
  return llvm::Align(ElementAlignment(index, layout.getTypeStoreSize(storage)));
}

}  // namespace

llvm::Value* LoadElement(llvm::IRBuilder<>& b, DType t, llvm::Value* base, llvm::Value* index) {
  llvm::Type* st = StorageType(b.getContext(), t);
  llvm::Value* addr = b.CreateInBoundsGEP(st, base, index);
  llvm::Value* v = b.CreateAlignedLoad(st, addr, ElementAlign(b, st, index));
  switch (t) {
    case DType::kPred:
      return b.CreateICmpNE(v, b.getInt8(0));
    case DType::kF16:
      return b.CreateFPExt(v, b.getFloatTy());
    case DType::kBF16:
      return Bf16BitsToFloat(b, v);
    default:
      return v;
  }
}

void StoreElement(llvm::IRBuilder<>& b, DType t, llvm::Value* value, llvm::Value* base,
                  llvm::Value* index) {
  llvm::Type* st = StorageType(b.getContext(), t);
  llvm::Value* v = value;
  switch (t) {
    case DType::kPred:
      v = b.CreateZExt(value, b.getInt8Ty());
      break;
    case DType::kF16:
      v = b.CreateFPTrunc(value, b.getHalfTy());
      break;
    case DType::kBF16:
      v = FloatToBf16Bits(b, value);
      break;
    default:
      break;
  }
  b.CreateAlignedStore(v, b.CreateInBoundsGEP(st, base, index), ElementAlign(b, st, index));
}

llvm::Value* RoundFloatTo(llvm::IRBuilder<>& b, llvm::Value* value, DType t) {
  switch (t) {
    case DType::kF16:
      // fptrunc from double to half rounds once, so go straight to half from either width.
      return b.CreateFPExt(b.CreateFPTrunc(value, b.getHalfTy()), b.getFloatTy());
    case DType::kBF16: {
      llvm::Value* f =
          value->getType()->isDoubleTy() ? b.CreateFPTrunc(value, b.getFloatTy()) : value;
      return Bf16BitsToFloat(b, FloatToBf16Bits(b, f));
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
      bits = FloatToBf16Bits(b, value);
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
