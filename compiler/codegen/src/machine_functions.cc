// The portable IR's machine functions (llvm_pipeline.h): the calls kernels make and the
// bodies each consumer gives them.
#include "machine_functions.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <string>
#include <vector>

#include "stitch/codegen/llvm_pipeline.h"

namespace stitch::codegen {
namespace {

llvm::FunctionType* RoundingType(llvm::LLVMContext& ctx) {
  return llvm::FunctionType::get(llvm::Type::getInt16Ty(ctx), {llvm::Type::getFloatTy(ctx)}, false);
}

llvm::FunctionType* PrefetchType(llvm::LLVMContext& ctx) {
  return llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {llvm::PointerType::get(ctx, 0)},
                                 false);
}

llvm::FunctionType* MinMaxType(llvm::LLVMContext& ctx) {
  llvm::Type* f32 = llvm::Type::getFloatTy(ctx);
  return llvm::FunctionType::get(f32, {f32, f32}, false);
}

// Nearest even from the bits: add 0x7fff plus the kept part's lowest bit, then truncate.
llvm::Value* RoundFromBits(llvm::IRBuilder<>& b, llvm::Value* f) {
  llvm::Value* bits = b.CreateBitCast(f, b.getInt32Ty());
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value* rounded = b.CreateAdd(bits, b.CreateAdd(lsb, b.getInt32(0x7fff)));
  llvm::Value* is_nan = b.CreateFCmpUNO(f, f);
  llvm::Value* nan_bits = b.CreateOr(bits, b.getInt32(0x00400000));
  llvm::Value* chosen = b.CreateSelect(is_nan, nan_bits, rounded);
  return b.CreateTrunc(b.CreateLShr(chosen, 16), b.getInt16Ty());
}

// NaN when either operand is: ogt is false when y is NaN, which then picks y; a NaN x is
// caught by the second select.
llvm::Value* SoftFloatMax(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  llvm::Value* r = b.CreateSelect(b.CreateFCmpOGT(x, y), x, y);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, r);
}

llvm::Value* SoftFloatMin(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  llvm::Value* r = b.CreateSelect(b.CreateFCmpOLT(x, y), x, y);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, r);
}

// A call to machine function `name` of type `type`, declared pure on first use, so that the
// optimiser moves, merges and drops calls as it does arithmetic, and the load/store
// vectoriser sees no memory access in them.
llvm::Value* CallMachineFunction(llvm::IRBuilder<>& b, const char* name, llvm::FunctionType* type,
                                 llvm::ArrayRef<llvm::Value*> args) {
  llvm::Module& module = *b.GetInsertBlock()->getModule();
  llvm::FunctionCallee f = module.getOrInsertFunction(name, type);
  if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
  }
  return b.CreateCall(f, args);
}

// An NVVM intrinsic call marked as returning: LLVM 16 declares some without willreturn, and
// the load/store vectoriser stops a chain at any instruction that may not return (the
// stores of a vector of rounded values would stay scalar).
llvm::Value* ReturningIntrinsic(llvm::IRBuilder<>& b, llvm::Intrinsic::ID id,
                                llvm::ArrayRef<llvm::Type*> types,
                                llvm::ArrayRef<llvm::Value*> args) {
  llvm::CallInst* call = b.CreateIntrinsic(id, types, args);
  call->addFnAttr(llvm::Attribute::WillReturn);
  call->addFnAttr(llvm::Attribute::NoUnwind);
  return call;
}

// The declaration of `name` in `module`, checked to be one of `type`; null when the module
// does not declare it.
StatusOr<llvm::Function*> Declared(llvm::Module& module, const char* name,
                                   llvm::FunctionType* type) {
  llvm::Function* fn = module.getFunction(name);
  if (fn == nullptr) return fn;
  if (!fn->isDeclaration()) {
    return InvalidArgument(std::string("the module defines ") + name +
                           "; portable IR only declares it");
  }
  if (fn->getFunctionType() != type) {
    return InvalidArgument(std::string("the module declares ") + name + " with another type");
  }
  fn->setLinkage(llvm::GlobalValue::InternalLinkage);
  fn->addFnAttr(llvm::Attribute::AlwaysInline);
  return fn;
}

Status DefineRounding(llvm::Module& module, bool native) {
  STITCH_ASSIGN_OR_RETURN(llvm::Function * fn, Declared(module, kBf16RoundingFunction,
                                                        RoundingType(module.getContext())));
  if (fn == nullptr) return Status::Ok();
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", fn));
  llvm::Value* f = fn->getArg(0);
  if (!native) {
    b.CreateRet(RoundFromBits(b, f));
    return Status::Ok();
  }
  llvm::Value* bits = ReturningIntrinsic(b, llvm::Intrinsic::nvvm_f2bf16_rn, {}, {f});
  if (bits->getType() != b.getInt16Ty()) bits = b.CreateBitCast(bits, b.getInt16Ty());
  b.CreateRet(bits);
  return Status::Ok();
}

// max.NaN.f32 and min.NaN.f32 where `native` (llvm.maximum and llvm.minimum), else the
// compares and selects of SoftFloatMax and SoftFloatMin.
Status DefineMinMax(llvm::Module& module, bool native, bool max) {
  STITCH_ASSIGN_OR_RETURN(
      llvm::Function * fn,
      Declared(module, max ? kF32MaxFunction : kF32MinFunction, MinMaxType(module.getContext())));
  if (fn == nullptr) return Status::Ok();
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", fn));
  llvm::Value* x = fn->getArg(0);
  llvm::Value* y = fn->getArg(1);
  if (!native) {
    b.CreateRet(max ? SoftFloatMax(b, x, y) : SoftFloatMin(b, x, y));
    return Status::Ok();
  }
  const llvm::Intrinsic::ID id = max ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum;
  b.CreateRet(ReturningIntrinsic(b, id, {b.getFloatTy()}, {x, y}));
  return Status::Ok();
}

// prefetch.global.L2 where `native`; elsewhere nothing.
Status DefinePrefetch(llvm::Module& module, bool native) {
  STITCH_ASSIGN_OR_RETURN(llvm::Function * fn,
                          Declared(module, kL2PrefetchFunction, PrefetchType(module.getContext())));
  if (fn == nullptr) return Status::Ok();
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", fn));
  if (native) {
    auto* asm_type = llvm::FunctionType::get(b.getVoidTy(), {b.getInt64Ty()}, false);
    auto* prefetch = llvm::InlineAsm::get(asm_type, "prefetch.global.L2 [$0];", "l",
                                          /*hasSideEffects=*/true);
    // Buffers are global: the cast folds into the kernel parameter's once inlined.
    llvm::Value* global =
        b.CreateAddrSpaceCast(fn->getArg(0), llvm::PointerType::get(b.getContext(), 1));
    b.CreateCall(prefetch, {b.CreatePtrToInt(global, b.getInt64Ty())});
  }
  b.CreateRetVoid();
  return Status::Ok();
}

// The body of libdevice's `name` (declared by the kernel, f32 of `arity` f32 arguments) as
// `build` makes it; nothing when the kernel does not call it.
Status DefineLibdeviceFunction(
    llvm::Module& module, const char* name, int arity,
    const std::function<llvm::Value*(llvm::IRBuilder<>&, llvm::ArrayRef<llvm::Value*>)>& build) {
  llvm::Type* f32 = llvm::Type::getFloatTy(module.getContext());
  STITCH_ASSIGN_OR_RETURN(
      llvm::Function * fn,
      Declared(module, name,
               llvm::FunctionType::get(f32, std::vector<llvm::Type*>(arity, f32), false)));
  if (fn == nullptr) return Status::Ok();
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", fn));
  std::vector<llvm::Value*> args;
  for (llvm::Argument& a : fn->args()) args.push_back(&a);
  b.CreateRet(build(b, args));
  return Status::Ok();
}

}  // namespace

Status DefineFlushToZeroApproximations(llvm::Module& module) {
  STITCH_RETURN_IF_ERROR(DefineLibdeviceFunction(
      module, "__nv_fast_expf", 1, [](llvm::IRBuilder<>& b, llvm::ArrayRef<llvm::Value*> x) {
        llvm::Value* log2e = llvm::ConstantFP::get(b.getFloatTy(), 0x1.715476p+0);
        return ReturningIntrinsic(b, llvm::Intrinsic::nvvm_ex2_approx_ftz_f, {},
                                  {b.CreateFMul(x[0], log2e)});
      }));
  return DefineLibdeviceFunction(
      module, "__nv_fast_fdividef", 2, [](llvm::IRBuilder<>& b, llvm::ArrayRef<llvm::Value*> xy) {
        llvm::Value* reciprocal =
            ReturningIntrinsic(b, llvm::Intrinsic::nvvm_rcp_approx_ftz_f, {}, {xy[1]});
        // An ordinary multiply: LLVM folds it away for a dividend of 1 (the logistic's), and
        // ContractSingleUseProducts fuses it with an add that alone takes the quotient.
        return b.CreateFMul(xy[0], reciprocal);
      });
}

llvm::Value* EmitBf16Rounding(llvm::IRBuilder<>& b, llvm::Value* value) {
  return CallMachineFunction(b, kBf16RoundingFunction, RoundingType(b.getContext()), {value});
}

llvm::Value* FloatMax(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  if (!x->getType()->isFloatTy()) return SoftFloatMax(b, x, y);
  return CallMachineFunction(b, kF32MaxFunction, MinMaxType(b.getContext()), {x, y});
}

llvm::Value* FloatMin(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  if (!x->getType()->isFloatTy()) return SoftFloatMin(b, x, y);
  return CallMachineFunction(b, kF32MinFunction, MinMaxType(b.getContext()), {x, y});
}

void EmitL2Prefetch(llvm::IRBuilder<>& b, llvm::Value* address) {
  llvm::Module& module = *b.GetInsertBlock()->getModule();
  llvm::FunctionCallee f =
      module.getOrInsertFunction(kL2PrefetchFunction, PrefetchType(b.getContext()));
  // Kept (it touches memory no load or store of the kernel sees), and no barrier to the
  // vectoriser's merging of the kernel's own accesses.
  if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    fn->setOnlyAccessesInaccessibleMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
  }
  b.CreateCall(f, {address});
}

Status DefineMachineFunctions(llvm::Module& module, bool native) {
  STITCH_RETURN_IF_ERROR(DefineRounding(module, native));
  STITCH_RETURN_IF_ERROR(DefineMinMax(module, native, /*max=*/true));
  STITCH_RETURN_IF_ERROR(DefinePrefetch(module, native));
  return DefineMinMax(module, native, /*max=*/false);
}

}  // namespace stitch::codegen
