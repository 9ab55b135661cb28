#include "kernel_context.h"

#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Metadata.h>

namespace stitch::codegen {
namespace {

llvm::Value* ReadSreg(KernelContext& kc, llvm::Intrinsic::ID x, llvm::Intrinsic::ID y,
                      llvm::Intrinsic::ID z, Dim d) {
  llvm::Intrinsic::ID id = d == Dim::kX ? x : d == Dim::kY ? y : z;
  llvm::Value* v = kc.b.CreateIntrinsic(id, {}, {});
  return kc.b.CreateZExtOrTrunc(v, kc.index_ty);
}

}  // namespace

llvm::Value* ThreadIdx(KernelContext& kc, Dim d) {
  using namespace llvm::Intrinsic;
  if (kc.logical_block[0] == 0) {
    return ReadSreg(kc, nvvm_read_ptx_sreg_tid_x, nvvm_read_ptx_sreg_tid_y,
                    nvvm_read_ptx_sreg_tid_z, d);
  }
  if (d == Dim::kZ) return kc.Index(0);
  llvm::Value* tid = ReadSreg(kc, nvvm_read_ptx_sreg_tid_x, nvvm_read_ptx_sreg_tid_y,
                              nvvm_read_ptx_sreg_tid_z, Dim::kX);
  llvm::Value* width = kc.Index(kc.logical_block[0]);
  return d == Dim::kX ? kc.b.CreateURem(tid, width) : kc.b.CreateUDiv(tid, width);
}
llvm::Value* BlockDim(KernelContext& kc, Dim d) {
  using namespace llvm::Intrinsic;
  if (kc.logical_block[0] == 0) {
    return ReadSreg(kc, nvvm_read_ptx_sreg_ntid_x, nvvm_read_ptx_sreg_ntid_y,
                    nvvm_read_ptx_sreg_ntid_z, d);
  }
  return kc.Index(d == Dim::kX ? kc.logical_block[0] : d == Dim::kY ? kc.logical_block[1] : 1);
}
llvm::Value* LinearThreadIdx(KernelContext& kc) {
  return kc.b.CreateAdd(ThreadIdx(kc, Dim::kX),
                        kc.b.CreateMul(ThreadIdx(kc, Dim::kY), BlockDim(kc, Dim::kX)));
}
llvm::Value* BlockIdx(KernelContext& kc, Dim d) {
  using namespace llvm::Intrinsic;
  return ReadSreg(kc, nvvm_read_ptx_sreg_ctaid_x, nvvm_read_ptx_sreg_ctaid_y,
                  nvvm_read_ptx_sreg_ctaid_z, d);
}
llvm::Value* GridDim(KernelContext& kc, Dim d) {
  using namespace llvm::Intrinsic;
  return ReadSreg(kc, nvvm_read_ptx_sreg_nctaid_x, nvvm_read_ptx_sreg_nctaid_y,
                  nvvm_read_ptx_sreg_nctaid_z, d);
}

void Barrier(KernelContext& kc) { kc.b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }

Status EmitForLoop(KernelContext& kc, const char* name, llvm::Value* start, llvm::Value* end,
                   llvm::Value* step, const std::function<Status(llvm::Value*)>& body) {
  return EmitForLoop(kc, name, start, end, step, body, nullptr);
}

Status EmitForLoop(KernelContext& kc, const char* name, llvm::Value* start, llvm::Value* end,
                   llvm::Value* step, const std::function<Status(llvm::Value*)>& body,
                   llvm::Value** exit_value, bool unrollable) {
  llvm::IRBuilder<>& b = kc.b;
  llvm::BasicBlock* pre = b.GetInsertBlock();
  std::string n(name);
  auto* header = llvm::BasicBlock::Create(kc.ctx, n + ".header", kc.fn);
  auto* body_bb = llvm::BasicBlock::Create(kc.ctx, n + ".body", kc.fn);
  auto* exit = llvm::BasicBlock::Create(kc.ctx, n + ".exit", kc.fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* iv = b.CreatePHI(start->getType(), 2, n + ".iv");
  iv->addIncoming(start, pre);
  b.CreateCondBr(b.CreateICmpSLT(iv, end), body_bb, exit);
  b.SetInsertPoint(body_bb);
  STITCH_RETURN_IF_ERROR(body(iv));
  // Steps never overflow: every index space is at most half the index type's range.
  llvm::Value* next = b.CreateAdd(iv, step, n + ".next", /*HasNUW=*/true, /*HasNSW=*/true);
  iv->addIncoming(next, b.GetInsertBlock());
  llvm::BranchInst* latch = b.CreateBr(header);
  if (!unrollable) {
    // A loop ID is a distinct node whose first operand is itself.
    llvm::MDNode* disable =
        llvm::MDNode::get(kc.ctx, {llvm::MDString::get(kc.ctx, "llvm.loop.unroll.disable")});
    llvm::TempMDTuple placeholder = llvm::MDNode::getTemporary(kc.ctx, {});
    llvm::MDNode* id = llvm::MDNode::getDistinct(kc.ctx, {placeholder.get(), disable});
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  b.SetInsertPoint(exit);
  // The exit block's only predecessor is the header, so the header's phi holds there.
  if (exit_value) *exit_value = iv;
  return Status::Ok();
}

Status EmitIf(KernelContext& kc, const char* name, llvm::Value* cond,
              const std::function<Status()>& then) {
  llvm::IRBuilder<>& b = kc.b;
  std::string n(name);
  auto* then_bb = llvm::BasicBlock::Create(kc.ctx, n + ".then", kc.fn);
  auto* done = llvm::BasicBlock::Create(kc.ctx, n + ".done", kc.fn);
  b.CreateCondBr(cond, then_bb, done);
  b.SetInsertPoint(then_bb);
  STITCH_RETURN_IF_ERROR(then());
  b.CreateBr(done);
  b.SetInsertPoint(done);
  return Status::Ok();
}

llvm::AllocaInst* EntryAlloca(KernelContext& kc, llvm::Type* ty, const char* name) {
  llvm::BasicBlock& entry = kc.fn->getEntryBlock();
  llvm::IRBuilder<> eb(&entry, entry.getFirstInsertionPt());
  return eb.CreateAlloca(ty, nullptr, name);
}

llvm::GlobalVariable* SharedArray(KernelContext& kc, llvm::Type* ty, uint64_t count,
                                  const char* name) {
  auto* arr = llvm::ArrayType::get(ty, count);
  // Shared memory cannot have an initialiser on the GPU; undef is the only allowed one.
  auto* gv =
      new llvm::GlobalVariable(kc.module, arr, /*isConstant=*/false,
                               llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(arr), name,
                               nullptr, llvm::GlobalValue::NotThreadLocal, /*AddressSpace=*/3);
  gv->setAlignment(llvm::Align(8));
  return gv;
}

llvm::GlobalVariable* DynamicSharedMemory(KernelContext& kc) {
  constexpr const char* kName = "stitch_dynamic_shared";
  if (llvm::GlobalVariable* existing = kc.module.getNamedGlobal(kName)) return existing;
  auto* arr = llvm::ArrayType::get(llvm::Type::getInt8Ty(kc.ctx), 0);
  auto* gv = new llvm::GlobalVariable(kc.module, arr, /*isConstant=*/false,
                                      llvm::GlobalValue::ExternalLinkage, nullptr, kName, nullptr,
                                      llvm::GlobalValue::NotThreadLocal, /*AddressSpace=*/3);
  gv->setAlignment(llvm::Align(16));
  return gv;
}

std::string DescribeNode(const Graph& g, int id) {
  std::string s = "node " + std::to_string(id);
  if (id >= 0 && id < static_cast<int>(g.nodes.size())) {
    const Node& n = g.nodes[id];
    if (!n.name.empty()) s += " '" + n.name + "'";
    s += " (" + std::string(OpCodeName(n.op)) + ")";
  }
  return s;
}

llvm::Value* KernelContext::RunCount(int64_t count, bool varies) {
  if (!varies || outer_extent == nullptr) return Index(count);
  // count = per_extent x top at the top extent, so the division is exact.
  const int64_t per_extent = count / shape_class->extent;
  return b.CreateMul(Index(per_extent), outer_extent, "run_count", true, true);
}

}  // namespace stitch::codegen
