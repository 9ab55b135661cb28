#include "grid_barrier.h"

#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/Support/raw_ostream.h>

#include "kernel_context.h"

namespace stitch::codegen {
namespace {

llvm::FunctionType* GridBarrierType(llvm::LLVMContext& ctx) {
  return llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {llvm::PointerType::get(ctx, 0)},
                                 false);
}

llvm::Value* Sreg(llvm::IRBuilder<>& b, llvm::Intrinsic::ID id) {
  return b.CreateIntrinsic(id, {}, {});
}

}  // namespace

llvm::Function* DeclareGridBarrier(llvm::Module& module) {
  if (llvm::Function* f = module.getFunction(kGridBarrierFunction)) return f;
  auto* f =
      llvm::Function::Create(GridBarrierType(module.getContext()),
                             llvm::GlobalValue::ExternalLinkage, kGridBarrierFunction, module);
  // Like llvm.nvvm.barrier0: no optimisation may make the call control-dependent on more
  // (or fewer) values than it is.
  f->setConvergent();
  f->setDoesNotThrow();
  f->getArg(0)->setName("workspace");
  return f;
}

llvm::CallInst* EmitGridBarrier(llvm::IRBuilder<>& b, llvm::Value* workspace) {
  llvm::Module& module = *b.GetInsertBlock()->getModule();
  llvm::Function* f = DeclareGridBarrier(module);
  llvm::Type* generic = llvm::PointerType::get(module.getContext(), 0);
  if (workspace->getType() != generic) workspace = b.CreateAddrSpaceCast(workspace, generic);
  llvm::CallInst* call = b.CreateCall(f, {workspace});
  call->setConvergent();
  return call;
}

void GridBarrier(KernelContext& kc, llvm::Value* workspace) { EmitGridBarrier(kc.b, workspace); }

StatusOr<llvm::Value*> EmitLastArrival(KernelContext& kc, llvm::Value* counter,
                                       llvm::Value* arrivals) {
  llvm::IRBuilder<>& b = kc.b;
  llvm::Type* i32 = b.getInt32Ty();
  llvm::AllocaInst* last = EntryAlloca(kc, b.getInt1Ty(), "last_arrival");
  b.CreateStore(b.getFalse(), last);
  // Every thread of the block has written its results before the block arrives.
  Barrier(kc);
  STITCH_RETURN_IF_ERROR(
      EmitIf(kc, "arrive", b.CreateICmpEQ(LinearThreadIdx(kc), kc.Index(0)), [&]() -> Status {
        // The same pattern as the grid barrier's: a fence makes the block's writes (ordered
        // before it by the barrier) visible to the whole GPU before its arrival is, and the
        // last block's fence after the add orders the others' writes before its reads.
        llvm::Value* word = b.CreateAddrSpaceCast(counter, llvm::PointerType::get(kc.ctx, 1));
        b.CreateIntrinsic(llvm::Intrinsic::nvvm_membar_gl, {}, {});
        llvm::Value* before = b.CreateAtomicRMW(llvm::AtomicRMWInst::Add, word, b.getInt32(1),
                                                llvm::Align(4), llvm::AtomicOrdering::Monotonic);
        llvm::Value* is_last =
            b.CreateICmpEQ(before, b.CreateSub(b.CreateZExtOrTrunc(arrivals, i32), b.getInt32(1)));
        b.CreateStore(is_last, last);
        return EmitIf(kc, "reset", is_last, [&]() -> Status {
          // No other block of the launch arrives here again; the next launch finds 0.
          b.CreateAlignedStore(b.getInt32(0), word, llvm::Align(4), /*isVolatile=*/true);
          b.CreateIntrinsic(llvm::Intrinsic::nvvm_membar_gl, {}, {});
          return Status::Ok();
        });
      }));
  // The leader's answer reaches every thread of the block with the barrier that releases it.
  llvm::Value* any = b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0_or, {},
                                       {b.CreateZExt(b.CreateLoad(b.getInt1Ty(), last), i32)});
  return b.CreateICmpNE(any, b.getInt32(0), "is_last_block");
}

Status DefineGridBarrier(llvm::Module& module) {
  llvm::Function* f = module.getFunction(kGridBarrierFunction);
  if (f == nullptr) return Status::Ok();
  llvm::LLVMContext& ctx = module.getContext();
  if (f->getFunctionType() != GridBarrierType(ctx)) {
    std::string type;
    llvm::raw_string_ostream os(type);
    f->getFunctionType()->print(os);
    return InvalidArgument(std::string(kGridBarrierFunction) + " is declared as " + os.str() +
                           "; the contract is void (ptr)");
  }
  if (!f->isDeclaration()) {
    return InvalidArgument(std::string(kGridBarrierFunction) +
                           " has a body in the portable IR; it must only be declared");
  }
  if (f->use_empty()) {
    f->eraseFromParent();
    return Status::Ok();
  }
  for (llvm::User* u : f->users()) {
    auto* call = llvm::dyn_cast<llvm::CallBase>(u);
    if (call == nullptr) continue;
    // A noalias parameter the kernel does not capture looks private to alias analysis,
    // which would then let its loads and stores cross the barrier.
    for (llvm::Argument& arg : call->getFunction()->args()) {
      if (arg.hasNoAliasAttr() && !arg.onlyReadsMemory()) arg.removeAttr(llvm::Attribute::NoAlias);
    }
  }

  f->setLinkage(llvm::GlobalValue::InternalLinkage);
  f->removeFnAttr(llvm::Attribute::NoInline);
  f->removeFnAttr(llvm::Attribute::OptimizeNone);
  f->addFnAttr(llvm::Attribute::AlwaysInline);
  f->setConvergent();
  f->setDoesNotThrow();

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto* arrive = llvm::BasicBlock::Create(ctx, "arrive", f);
  auto* spin = llvm::BasicBlock::Create(ctx, "spin", f);
  auto* after = llvm::BasicBlock::Create(ctx, "after", f);
  auto* done = llvm::BasicBlock::Create(ctx, "done", f);
  llvm::IRBuilder<> b(entry);
  auto* i32 = b.getInt32Ty();
  const llvm::Align align(4);
  auto membar = [&] { b.CreateIntrinsic(llvm::Intrinsic::nvvm_membar_gl, {}, {}); };
  using namespace llvm::Intrinsic;
  // Whether the three special registers x, y and z are all 0.
  auto at_origin = [&](llvm::Intrinsic::ID x, llvm::Intrinsic::ID y, llvm::Intrinsic::ID z) {
    return b.CreateICmpEQ(b.CreateOr(b.CreateOr(Sreg(b, x), Sreg(b, y)), Sreg(b, z)),
                          b.getInt32(0));
  };

  // Every thread of the block has finished the stage before its leader arrives.
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  b.CreateCondBr(
      at_origin(nvvm_read_ptx_sreg_tid_x, nvvm_read_ptx_sreg_tid_y, nvvm_read_ptx_sreg_tid_z),
      arrive, done);

  // Each block's leader arrives with one atomic add, and the last arrival releases the grid
  // with that same add: block (0,0,0) adds 2^31 - (blocks - 1), every other block 1, so the
  // word's low 31 bits count up from 0 and its top bit flips exactly when the last block
  // arrives, leaving the count at 0 for the next barrier. A release step after the last
  // arrival would put one more fence and one more round trip through L2 between it and the
  // waiting blocks. The fence before the add makes the block's writes (ordered before it by
  // bar.sync) visible to the whole GPU before its arrival is.
  b.SetInsertPoint(arrive);
  llvm::Value* word =
      b.CreateAddrSpaceCast(f->getArg(0), llvm::PointerType::get(ctx, 1), "arrivals");
  llvm::Value* blocks = b.CreateMul(
      b.CreateMul(Sreg(b, nvvm_read_ptx_sreg_nctaid_x), Sreg(b, nvvm_read_ptx_sreg_nctaid_y)),
      Sreg(b, nvvm_read_ptx_sreg_nctaid_z));
  llvm::Value* top = b.getInt32(0x80000000u);
  llvm::Value* increment = b.CreateSelect(
      at_origin(nvvm_read_ptx_sreg_ctaid_x, nvvm_read_ptx_sreg_ctaid_y, nvvm_read_ptx_sreg_ctaid_z),
      b.CreateSub(top, b.CreateSub(blocks, b.getInt32(1))), b.getInt32(1));
  membar();
  llvm::Value* before = b.CreateAtomicRMW(llvm::AtomicRMWInst::Add, word, increment, align,
                                          llvm::AtomicOrdering::Monotonic);
  auto flipped = [&](llvm::Value* now) {
    return b.CreateICmpNE(b.CreateAnd(b.CreateXor(now, before), top), b.getInt32(0));
  };
  b.CreateCondBr(flipped(b.CreateAdd(before, increment)), after, spin);

  b.SetInsertPoint(spin);
  llvm::LoadInst* now = b.CreateAlignedLoad(i32, word, align, /*isVolatile=*/true);
  b.CreateCondBr(flipped(now), after, spin);

  // Whatever the other blocks wrote before arriving is visible from here on.
  b.SetInsertPoint(after);
  membar();
  b.CreateBr(done);

  b.SetInsertPoint(done);
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  b.CreateRetVoid();
  return Status::Ok();
}

}  // namespace stitch::codegen
