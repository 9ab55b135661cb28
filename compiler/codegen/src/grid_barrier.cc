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
  auto* release = llvm::BasicBlock::Create(ctx, "release", f);
  auto* spin = llvm::BasicBlock::Create(ctx, "spin", f);
  auto* after = llvm::BasicBlock::Create(ctx, "after", f);
  auto* done = llvm::BasicBlock::Create(ctx, "done", f);
  llvm::IRBuilder<> b(entry);
  auto* i32 = b.getInt32Ty();
  const llvm::Align align(4);
  auto membar = [&] { b.CreateIntrinsic(llvm::Intrinsic::nvvm_membar_gl, {}, {}); };

  // Every thread of the block has finished the stage before its leader arrives.
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  using namespace llvm::Intrinsic;
  llvm::Value* tid =
      b.CreateOr(b.CreateOr(Sreg(b, nvvm_read_ptx_sreg_tid_x), Sreg(b, nvvm_read_ptx_sreg_tid_y)),
                 Sreg(b, nvvm_read_ptx_sreg_tid_z));
  b.CreateCondBr(b.CreateICmpEQ(tid, b.getInt32(0)), arrive, done);

  // The leader reads the generation before arriving: it cannot move on until this block
  // has arrived. The fence makes the block's writes (ordered before it by bar.sync)
  // visible to the whole GPU before the arrival is.
  b.SetInsertPoint(arrive);
  llvm::Value* counter =
      b.CreateAddrSpaceCast(f->getArg(0), llvm::PointerType::get(ctx, 1), "counter");
  llvm::Value* generation = b.CreateConstInBoundsGEP1_32(i32, counter, 1, "generation");
  llvm::LoadInst* seen = b.CreateAlignedLoad(i32, generation, align, /*isVolatile=*/true);
  membar();
  llvm::Value* arrived = b.CreateAtomicRMW(llvm::AtomicRMWInst::Add, counter, b.getInt32(1), align,
                                           llvm::AtomicOrdering::Monotonic);
  llvm::Value* blocks = b.CreateMul(
      b.CreateMul(Sreg(b, nvvm_read_ptx_sreg_nctaid_x), Sreg(b, nvvm_read_ptx_sreg_nctaid_y)),
      Sreg(b, nvvm_read_ptx_sreg_nctaid_z));
  b.CreateCondBr(b.CreateICmpEQ(arrived, b.CreateSub(blocks, b.getInt32(1))), release, spin);

  // The last block to arrive: no other block can touch the counter until the generation
  // moves, so it is reset first (ready for the next barrier and the next launch).
  b.SetInsertPoint(release);
  b.CreateAlignedStore(b.getInt32(0), counter, align, /*isVolatile=*/true);
  membar();
  b.CreateAtomicRMW(llvm::AtomicRMWInst::Add, generation, b.getInt32(1), align,
                    llvm::AtomicOrdering::Monotonic);
  b.CreateBr(after);

  b.SetInsertPoint(spin);
  llvm::LoadInst* now = b.CreateAlignedLoad(i32, generation, align, /*isVolatile=*/true);
  b.CreateCondBr(b.CreateICmpEQ(now, seen), spin, after);

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
