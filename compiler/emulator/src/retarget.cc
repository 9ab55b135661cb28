#include "retarget.h"

#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <functional>
#include <map>
#include <vector>

#include "block_scheduler.h"
#include "runtime.h"
#include "stitch/codegen/llvm_pipeline.h"

namespace stitch::emu {
namespace {

using llvm::StringRef;

// The grid-wide barrier of the portable-IR contract (codegen.h): `void (ptr workspace)`.
constexpr char kGridSyncFunction[] = "stitch.grid.sync";

// Declares (or finds) the runtime function `name`. Readnone ones (thread ids, the block's
// shared memory) are constant for a thread, so they may be CSE'd and hoisted; convergent
// ones keep their control dependence, like the NVVM originals.
llvm::FunctionCallee DeclareRuntime(llvm::Module& m, StringRef name, llvm::FunctionType* type,
                                    bool readnone, bool convergent) {
  llvm::FunctionCallee callee = m.getOrInsertFunction(name, type);
  if (auto* fn = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    fn->setDoesNotThrow();
    if (readnone) {
      fn->setDoesNotAccessMemory();
      fn->addFnAttr(llvm::Attribute::WillReturn);
      fn->addFnAttr(llvm::Attribute::Speculatable);
    }
    if (convergent) fn->setConvergent();
  }
  return callee;
}

// Functions listed as kernels in nvvm.annotations.
std::vector<llvm::Function*> AnnotatedKernels(llvm::Module& m) {
  std::vector<llvm::Function*> out;
  llvm::NamedMDNode* md = m.getNamedMetadata("nvvm.annotations");
  if (md == nullptr) return out;
  for (llvm::MDNode* node : md->operands()) {
    if (node->getNumOperands() < 3) continue;
    auto* fn = llvm::mdconst::dyn_extract_or_null<llvm::Function>(node->getOperand(0));
    auto* key = llvm::dyn_cast_or_null<llvm::MDString>(node->getOperand(1));
    if (fn != nullptr && key != nullptr && key->getString() == "kernel") out.push_back(fn);
  }
  return out;
}

class Rewriter {
 public:
  Rewriter(llvm::Module& m, const std::string& kernel) : m_(m), kernel_(kernel) {}

  // Replaces every call to an llvm.nvvm.* function. Returns UNIMPLEMENTED for the ones the
  // emulator does not model.
  Status LowerIntrinsics() {
    std::vector<llvm::Function*> nvvm;
    for (llvm::Function& f : m_) {
      if (f.isDeclaration() && f.getName().startswith("llvm.nvvm.")) nvvm.push_back(&f);
    }
    for (llvm::Function* f : nvvm) {
      std::vector<llvm::CallInst*> calls;
      for (llvm::User* u : f->users()) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(u);
        if (call == nullptr || call->getCalledFunction() != f) {
          return Unimplemented("kernel " + kernel_ + ": " + f->getName().str() +
                               " is used other than as a direct call");
        }
        calls.push_back(call);
      }
      for (llvm::CallInst* call : calls) STITCH_RETURN_IF_ERROR(Lower(f->getName(), call));
      if (f->use_empty()) f->eraseFromParent();
    }
    return Status::Ok();
  }

  // Replaces every call to the contract's grid barrier with the runtime's. Returns whether
  // the kernel has one; INVALID_ARGUMENT when it is defined or has the wrong type.
  StatusOr<bool> LowerGridBarrier() {
    llvm::Function* f = m_.getFunction(kGridSyncFunction);
    if (f == nullptr) return false;
    llvm::LLVMContext& ctx = m_.getContext();
    auto* ptr = llvm::PointerType::get(ctx, 0);
    auto* i32 = llvm::Type::getInt32Ty(ctx);
    auto* want = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false);
    if (!f->isDeclaration()) {
      return InvalidArgument("kernel " + kernel_ + " defines " + kGridSyncFunction +
                             "; portable IR only declares it");
    }
    if (f->getFunctionType() != want) {
      std::string type;
      llvm::raw_string_ostream os(type);
      f->getFunctionType()->print(os);
      return InvalidArgument("kernel " + kernel_ + " declares " + kGridSyncFunction + " as " +
                             os.str() + "; the contract is void (ptr)");
    }
    for (llvm::User* u : f->users()) {
      auto* call = llvm::dyn_cast<llvm::CallInst>(u);
      if (call == nullptr || call->getCalledFunction() != f) {
        return Unimplemented("kernel " + kernel_ + ": " + kGridSyncFunction +
                             " is used other than as a direct call");
      }
    }
    // Sites are numbered in program order, for the deadlock messages.
    std::vector<llvm::CallInst*> calls;
    for (llvm::Function& fn : m_) {
      for (llvm::Instruction& inst : llvm::instructions(fn)) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(&inst);
        if (call != nullptr && call->getCalledFunction() == f) calls.push_back(call);
      }
    }
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {i32, ptr}, false);
    llvm::FunctionCallee runtime = Runtime(kGridBarrierName, type, false, true);
    for (llvm::CallInst* call : calls) {
      llvm::IRBuilder<> b(call);
      llvm::CallInst* c =
          b.CreateCall(runtime, {b.getInt32(next_grid_site_++), call->getArgOperand(0)});
      c->setConvergent();
      Replace(call, nullptr);
    }
    f->eraseFromParent();
    return !calls.empty();
  }

 private:
  llvm::FunctionCallee Runtime(StringRef name, llvm::FunctionType* type, bool readnone,
                               bool convergent) {
    return DeclareRuntime(m_, name, type, readnone, convergent);
  }

  void Replace(llvm::CallInst* call, llvm::Value* v) {
    if (v != nullptr) call->replaceAllUsesWith(v);
    call->eraseFromParent();
  }

  llvm::Value* WarpCall(llvm::IRBuilder<>& b, WarpOp op, llvm::Value* mask, llvm::Value* value,
                        llvm::Value* lane, llvm::Value* clamp) {
    auto* i32 = b.getInt32Ty();
    auto* type = llvm::FunctionType::get(b.getInt64Ty(), {i32, i32, i32, i32, i32}, false);
    llvm::FunctionCallee fn = Runtime(kWarpName, type, false, true);
    llvm::CallInst* call =
        b.CreateCall(fn, {b.getInt32(static_cast<uint32_t>(op)), mask, value, lane, clamp});
    call->setConvergent();
    return call;
  }

  Status Lower(StringRef name, llvm::CallInst* call) {
    llvm::IRBuilder<> b(call);
    auto* i32 = b.getInt32Ty();
    StringRef rest = name;
    rest.consume_front("llvm.nvvm.");

    if (rest.consume_front("read.ptx.sreg.")) {
      static const char* const kSregs[] = {"tid.x",    "tid.y",    "tid.z",   "ntid.x",  "ntid.y",
                                           "ntid.z",   "ctaid.x",  "ctaid.y", "ctaid.z", "nctaid.x",
                                           "nctaid.y", "nctaid.z", "laneid"};
      if (rest == "warpsize") {
        Replace(call, llvm::ConstantInt::get(call->getType(), kWarpSize));
        return Status::Ok();
      }
      for (const char* s : kSregs) {
        if (rest != s) continue;
        std::string fn_name = std::string(kSregPrefix) + s;
        for (char& c : fn_name) {
          if (c == '.') c = '_';
        }
        auto* type = llvm::FunctionType::get(i32, false);
        llvm::Value* v = b.CreateCall(Runtime(fn_name, type, true, false));
        Replace(call, b.CreateZExtOrTrunc(v, call->getType()));
        return Status::Ok();
      }
      return Unimplemented("kernel " + kernel_ + " reads " + name.str() +
                           ", which the emulator does not model");
    }

    if (rest == "barrier0" || rest == "barrier.sync" || rest == "bar.sync" || rest == "barrier.n") {
      // A block-wide barrier; the named-barrier id is ignored (every thread takes part).
      auto* type = llvm::FunctionType::get(b.getVoidTy(), {i32}, false);
      llvm::CallInst* c =
          b.CreateCall(Runtime(kBarrierName, type, false, true), {b.getInt32(next_site_++)});
      c->setConvergent();
      Replace(call, nullptr);
      return Status::Ok();
    }
    if (rest == "barrier0.popc" || rest == "barrier0.and" || rest == "barrier0.or") {
      const uint32_t op = rest == "barrier0.popc" ? 0 : rest == "barrier0.and" ? 1 : 2;
      auto* type = llvm::FunctionType::get(i32, {i32, i32, i32}, false);
      llvm::Value* pred = b.CreateZExtOrTrunc(call->getArgOperand(0), i32);
      llvm::CallInst* c = b.CreateCall(Runtime(kBarrierReduceName, type, false, true),
                                       {b.getInt32(next_site_++), b.getInt32(op), pred});
      c->setConvergent();
      Replace(call, b.CreateZExtOrTrunc(c, call->getType()));
      return Status::Ok();
    }
    if (rest == "bar.warp.sync") {
      WarpCall(b, WarpOp::kSync, call->getArgOperand(0), b.getInt32(0), b.getInt32(0),
               b.getInt32(0));
      Replace(call, nullptr);
      return Status::Ok();
    }

    if (rest.startswith("shfl.")) return LowerShuffle(rest, call, b);

    if (rest.consume_front("vote.")) {
      WarpOp op;
      if (rest == "all.sync") {
        op = WarpOp::kVoteAll;
      } else if (rest == "any.sync") {
        op = WarpOp::kVoteAny;
      } else if (rest == "uni.sync") {
        op = WarpOp::kVoteUni;
      } else if (rest == "ballot.sync") {
        op = WarpOp::kVoteBallot;
      } else {
        return Unimplemented("kernel " + kernel_ + " uses " + name.str() +
                             ", which the emulator does not model");
      }
      llvm::Value* pred = b.CreateZExt(call->getArgOperand(1), i32);
      llvm::Value* r = WarpCall(b, op, call->getArgOperand(0), pred, b.getInt32(0), b.getInt32(0));
      Replace(call, b.CreateTrunc(r, call->getType()));
      return Status::Ok();
    }

    // Memory fences order memory between real threads; fibers switch only at runtime
    // calls, which the compiler already treats as opaque.
    if (rest.startswith("membar.") || rest.startswith("fence.")) {
      Replace(call, nullptr);
      return Status::Ok();
    }

    if (rest.startswith("ldg.global.")) {
      llvm::Value* ptr = call->getArgOperand(0);
      uint64_t align = 1;
      if (auto* a = llvm::dyn_cast<llvm::ConstantInt>(call->getArgOperand(1))) {
        align = std::max<uint64_t>(1, a->getZExtValue());
      }
      llvm::LoadInst* load = b.CreateLoad(call->getType(), ptr);
      load->setAlignment(llvm::Align(llvm::PowerOf2Ceil(align)));
      Replace(call, load);
      return Status::Ok();
    }

    // A few arithmetic intrinsics map one to one onto generic LLVM ones.
    static const std::map<std::string, llvm::Intrinsic::ID> kUnary = {
        {"sqrt.rn.f", llvm::Intrinsic::sqrt},        {"sqrt.f", llvm::Intrinsic::sqrt},
        {"sqrt.rn.d", llvm::Intrinsic::sqrt},        {"sqrt.approx.f", llvm::Intrinsic::sqrt},
        {"ex2.approx.f", llvm::Intrinsic::exp2},     {"ex2.approx.ftz.f", llvm::Intrinsic::exp2},
        {"ex2.approx.d", llvm::Intrinsic::exp2},     {"lg2.approx.f", llvm::Intrinsic::log2},
        {"lg2.approx.ftz.f", llvm::Intrinsic::log2}, {"lg2.approx.d", llvm::Intrinsic::log2},
        {"fabs.f", llvm::Intrinsic::fabs},           {"fabs.d", llvm::Intrinsic::fabs},
        {"floor.f", llvm::Intrinsic::floor},         {"floor.d", llvm::Intrinsic::floor},
        {"ceil.f", llvm::Intrinsic::ceil},           {"ceil.d", llvm::Intrinsic::ceil},
        {"trunc.f", llvm::Intrinsic::trunc},         {"trunc.d", llvm::Intrinsic::trunc},
        {"round.f", llvm::Intrinsic::round},         {"round.d", llvm::Intrinsic::round},
        {"sin.approx.f", llvm::Intrinsic::sin},      {"cos.approx.f", llvm::Intrinsic::cos},
    };
    static const std::map<std::string, llvm::Intrinsic::ID> kBinary = {
        {"fmin.f", llvm::Intrinsic::minnum},
        {"fmin.d", llvm::Intrinsic::minnum},
        {"fmax.f", llvm::Intrinsic::maxnum},
        {"fmax.d", llvm::Intrinsic::maxnum},
    };
    const std::string key = rest.str();
    if (auto it = kUnary.find(key); it != kUnary.end()) {
      Replace(call, b.CreateUnaryIntrinsic(it->second, call->getArgOperand(0)));
      return Status::Ok();
    }
    if (auto it = kBinary.find(key); it != kBinary.end()) {
      Replace(call,
              b.CreateBinaryIntrinsic(it->second, call->getArgOperand(0), call->getArgOperand(1)));
      return Status::Ok();
    }
    if (rest.startswith("fma.rn.")) {
      Replace(call, b.CreateIntrinsic(
                        llvm::Intrinsic::fma, {call->getType()},
                        {call->getArgOperand(0), call->getArgOperand(1), call->getArgOperand(2)}));
      return Status::Ok();
    }
    if (rest.startswith("rsqrt.approx.")) {
      llvm::Value* s = b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, call->getArgOperand(0));
      Replace(call, b.CreateFDiv(llvm::ConstantFP::get(call->getType(), 1.0), s));
      return Status::Ok();
    }
    if (rest.startswith("rcp.")) {
      Replace(call,
              b.CreateFDiv(llvm::ConstantFP::get(call->getType(), 1.0), call->getArgOperand(0)));
      return Status::Ok();
    }
    return Unimplemented("kernel " + kernel_ + " uses " + name.str() +
                         ", which the emulator does not model");
  }

  // llvm.nvvm.shfl[.sync].{up,down,bfly,idx}.{i32,f32}[p]
  Status LowerShuffle(StringRef rest, llvm::CallInst* call, llvm::IRBuilder<>& b) {
    const std::string full = "llvm.nvvm." + rest.str();
    rest.consume_front("shfl.");
    const bool sync = rest.consume_front("sync.");
    WarpOp op;
    if (rest.consume_front("up.")) {
      op = WarpOp::kShflUp;
    } else if (rest.consume_front("down.")) {
      op = WarpOp::kShflDown;
    } else if (rest.consume_front("bfly.")) {
      op = WarpOp::kShflBfly;
    } else if (rest.consume_front("idx.")) {
      op = WarpOp::kShflIdx;
    } else {
      return Unimplemented("kernel " + kernel_ + " uses " + full +
                           ", which the emulator does not model");
    }
    const bool with_pred = rest.consume_back("p");
    if (rest != "i32" && rest != "f32") {
      return Unimplemented("kernel " + kernel_ + " uses " + full +
                           ", which the emulator does not model");
    }
    auto* i32 = b.getInt32Ty();
    const unsigned base = sync ? 1 : 0;
    llvm::Value* mask = sync ? call->getArgOperand(0) : b.getInt32(0xffffffffu);
    llvm::Value* value = call->getArgOperand(base);
    llvm::Type* value_type = value->getType();
    if (!value_type->isIntegerTy(32)) value = b.CreateBitCast(value, i32);
    llvm::Value* r =
        WarpCall(b, op, mask, value, call->getArgOperand(base + 1), call->getArgOperand(base + 2));
    llvm::Value* result = b.CreateTrunc(r, i32);
    if (!value_type->isIntegerTy(32)) result = b.CreateBitCast(result, value_type);
    if (with_pred) {
      llvm::Value* pred = b.CreateTrunc(b.CreateLShr(r, 32), b.getInt1Ty());
      llvm::Value* agg = llvm::PoisonValue::get(call->getType());
      agg = b.CreateInsertValue(agg, result, {0});
      result = b.CreateInsertValue(agg, pred, {1});
    }
    Replace(call, result);
    return Status::Ok();
  }

  llvm::Module& m_;
  std::string kernel_;
  uint32_t next_site_ = 0;
  uint32_t next_grid_site_ = 0;
};

// True when constant `c` refers to one of `globals`, possibly through nested constants.
bool RefersTo(const llvm::Constant* c,
              const llvm::SmallPtrSetImpl<const llvm::GlobalVariable*>& globals) {
  if (const auto* g = llvm::dyn_cast<llvm::GlobalVariable>(c)) return globals.contains(g);
  for (const llvm::Use& op : c->operands()) {
    const auto* sub = llvm::dyn_cast<llvm::Constant>(op.get());
    if (sub != nullptr && RefersTo(sub, globals)) return true;
  }
  return false;
}

// Turns every constant expression over one of `globals` that an instruction uses into
// instructions, so that each use of a global is an instruction operand. A phi's operand is
// computed at the end of its incoming block.
void ExpandConstantExprs(llvm::Module& m,
                         const llvm::SmallPtrSetImpl<const llvm::GlobalVariable*>& globals) {
  for (llvm::Function& f : m) {
    std::vector<llvm::Instruction*> work;
    for (llvm::Instruction& inst : llvm::instructions(f)) work.push_back(&inst);
    while (!work.empty()) {
      llvm::Instruction* inst = work.back();
      work.pop_back();
      for (unsigned k = 0; k < inst->getNumOperands(); ++k) {
        auto* ce = llvm::dyn_cast<llvm::ConstantExpr>(inst->getOperand(k));
        if (ce == nullptr || !RefersTo(ce, globals)) continue;
        if (auto* phi = llvm::dyn_cast<llvm::PHINode>(inst)) {
          llvm::BasicBlock* in = phi->getIncomingBlock(k);
          llvm::Instruction* expanded = ce->getAsInstruction(in->getTerminator());
          // A block may appear several times; all its entries must keep one value.
          for (unsigned j = k; j < phi->getNumIncomingValues(); ++j) {
            if (phi->getIncomingBlock(j) == in && phi->getIncomingValue(j) == ce) {
              phi->setIncomingValue(j, expanded);
            }
          }
          work.push_back(expanded);
        } else {
          llvm::Instruction* expanded = ce->getAsInstruction(inst);
          inst->setOperand(k, expanded);
          work.push_back(expanded);
        }
      }
    }
  }
}

// Replaces every use of `g` (all instruction operands) with `make(insert_before)`.
Status ReplaceWithInstructions(llvm::GlobalVariable* g, const std::string& kernel,
                               const std::function<llvm::Value*(llvm::Instruction*)>& make) {
  g->removeDeadConstantUsers();
  std::vector<llvm::Instruction*> users;
  for (llvm::User* u : g->users()) {
    auto* inst = llvm::dyn_cast<llvm::Instruction>(u);
    if (inst == nullptr) {
      return Unimplemented("kernel " + kernel + ": shared memory " + g->getName().str() +
                           " is referenced from a constant, which a grid-wide launch cannot "
                           "place per block");
    }
    if (std::find(users.begin(), users.end(), inst) == users.end()) users.push_back(inst);
  }
  for (llvm::Instruction* inst : users) {
    if (auto* phi = llvm::dyn_cast<llvm::PHINode>(inst)) {
      for (unsigned k = 0; k < phi->getNumIncomingValues(); ++k) {
        if (phi->getIncomingValue(k) != g) continue;
        llvm::BasicBlock* in = phi->getIncomingBlock(k);
        llvm::Value* v = make(in->getTerminator());
        for (unsigned j = k; j < phi->getNumIncomingValues(); ++j) {
          if (phi->getIncomingBlock(j) == in && phi->getIncomingValue(j) == g) {
            phi->setIncomingValue(j, v);
          }
        }
      }
    } else {
      llvm::Value* v = make(inst);
      inst->replaceUsesOfWith(g, v);
    }
  }
  return Status::Ok();
}

struct SharedLayout {
  uint64_t bytes = 0;
  uint64_t align = 16;
};

// Packs every addrspace(3) global into one host global. Users keep their addrspace(3)
// pointer types (the x86 backend treats address space 3 as ordinary memory), so only the
// storage moves and no instruction needs rewriting. The global is externally visible so
// the optimiser must assume the opaque barrier call may read and write it.
//
// When `per_block` (a grid-wide launch, whose blocks run at once), there is no such global:
// each address is an offset from the block's own buffer, which a readnone runtime call
// returns (the scheduler knows the calling thread's block).
//
// A declaration without a size is the kernel's dynamic shared memory (`extern __shared__`):
// it takes `dynamic_bytes`, the launch's, after the static arrays, as on the GPU.
StatusOr<SharedLayout> PackSharedMemory(llvm::Module& m, const std::string& kernel, bool per_block,
                                        uint64_t dynamic_bytes) {
  std::vector<llvm::GlobalVariable*> shared;
  for (llvm::GlobalVariable& g : m.globals()) {
    if (g.getAddressSpace() == 3) shared.push_back(&g);
  }
  if (shared.empty()) return SharedLayout{};
  const llvm::DataLayout& dl = m.getDataLayout();
  uint64_t offset = 0;
  llvm::Align max_align(16);
  std::vector<uint64_t> offsets;
  // Declarations last, as the GPU places dynamic shared memory after the static arrays.
  std::stable_partition(shared.begin(), shared.end(),
                        [](const llvm::GlobalVariable* g) { return !g->isDeclaration(); });
  for (llvm::GlobalVariable* g : shared) {
    if (g->isDeclaration() && dynamic_bytes == 0) {
      return InvalidArgument("kernel " + kernel + ": shared memory " + g->getName().str() +
                             " is dynamic, and the kernel declares no dynamic shared bytes");
    }
    llvm::Type* type = g->getValueType();
    const llvm::Align align = std::max(g->getAlign().valueOrOne(), dl.getABITypeAlign(type));
    max_align = std::max(max_align, align);
    offset = llvm::alignTo(offset, align);
    offsets.push_back(offset);
    offset += g->isDeclaration() ? dynamic_bytes : dl.getTypeAllocSize(type).getFixedValue();
  }
  const uint64_t total = std::max<uint64_t>(offset, 1);
  auto* i8 = llvm::Type::getInt8Ty(m.getContext());
  auto* i64 = llvm::Type::getInt64Ty(m.getContext());
  if (per_block) {
    llvm::SmallPtrSet<const llvm::GlobalVariable*, 8> set(shared.begin(), shared.end());
    ExpandConstantExprs(m, set);
    auto* ptr = llvm::PointerType::get(m.getContext(), 0);
    llvm::FunctionCallee base_fn =
        DeclareRuntime(m, kSharedBaseName, llvm::FunctionType::get(ptr, false), true, false);
    for (size_t i = 0; i < shared.size(); ++i) {
      llvm::GlobalVariable* g = shared[i];
      const uint64_t off = offsets[i];
      STITCH_RETURN_IF_ERROR(ReplaceWithInstructions(g, kernel, [&](llvm::Instruction* at) {
        llvm::IRBuilder<> b(at);
        llvm::Value* base = b.CreateCall(base_fn);
        llvm::Value* addr = b.CreateInBoundsGEP(i8, base, llvm::ConstantInt::get(i64, off));
        return b.CreateAddrSpaceCast(addr, g->getType());
      }));
      g->eraseFromParent();
    }
    return SharedLayout{total, max_align.value()};
  }
  auto* storage_type = llvm::ArrayType::get(i8, total);
  auto* storage =
      new llvm::GlobalVariable(m, storage_type, false, llvm::GlobalValue::ExternalLinkage,
                               llvm::ConstantAggregateZero::get(storage_type), kSharedName);
  storage->setAlignment(max_align);
  for (size_t i = 0; i < shared.size(); ++i) {
    llvm::GlobalVariable* g = shared[i];
    llvm::Constant* addr = llvm::ConstantExpr::getInBoundsGetElementPtr(
        i8, storage, llvm::ConstantInt::get(i64, offsets[i]));
    g->replaceAllUsesWith(llvm::ConstantExpr::getAddrSpaceCast(addr, g->getType()));
    g->eraseFromParent();
  }
  return SharedLayout{total, max_align.value()};
}

void BuildEntryThunk(llvm::Module& m, llvm::Function* kernel) {
  llvm::LLVMContext& ctx = m.getContext();
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false);
  auto* entry = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, kEntryName, m);
  entry->setDoesNotThrow();
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", entry));
  std::vector<llvm::Value*> args;
  for (llvm::Argument& param : kernel->args()) {
    llvm::Value* slot = b.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), param.getArgNo());
    llvm::Value* addr = b.CreateLoad(ptr, slot);
    llvm::Type* pt = param.getType();
    if (pt->isPointerTy()) {
      args.push_back(pt->getPointerAddressSpace() == 0 ? addr : b.CreateAddrSpaceCast(addr, pt));
    } else {
      // A scalar parameter: args[i] points at its value.
      args.push_back(b.CreateLoad(pt, addr));
    }
  }
  b.CreateCall(kernel, args);
  b.CreateRetVoid();
}

uint64_t StaticFrameBytes(llvm::Module& m) {
  const llvm::DataLayout& dl = m.getDataLayout();
  uint64_t bytes = 0;
  for (llvm::Function& f : m) {
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      auto* alloca = llvm::dyn_cast<llvm::AllocaInst>(&inst);
      if (alloca == nullptr) continue;
      if (auto size = alloca->getAllocationSize(dl)) bytes += size->getFixedValue();
    }
  }
  return bytes;
}

}  // namespace

StatusOr<RetargetedModule> Retarget(llvm::LLVMContext& ctx, const std::string& bitcode,
                                    const std::string& name, uint64_t dynamic_shared_bytes,
                                    const std::string& triple, const llvm::DataLayout& layout) {
  const std::string label = name.empty() ? std::string("<unnamed>") : name;
  auto buffer = llvm::MemoryBuffer::getMemBuffer(bitcode, label, false);
  auto parsed = llvm::parseBitcodeFile(buffer->getMemBufferRef(), ctx);
  if (!parsed) {
    return InvalidArgument("kernel " + label + ": portable IR is not valid LLVM bitcode: " +
                           llvm::toString(parsed.takeError()));
  }
  std::unique_ptr<llvm::Module> module = std::move(*parsed);
  llvm::Module& m = *module;

  llvm::Function* kernel = name.empty() ? nullptr : m.getFunction(name);
  if (kernel == nullptr || kernel->isDeclaration()) {
    std::vector<llvm::Function*> kernels = AnnotatedKernels(m);
    if (name.empty() && kernels.size() == 1) kernel = kernels[0];
  }
  if (kernel == nullptr || kernel->isDeclaration()) {
    return InvalidArgument("kernel " + label + ": no such kernel function in its portable IR");
  }
  if (!kernel->getReturnType()->isVoidTy()) {
    return InvalidArgument("kernel " + label + " does not return void");
  }
  if (kernel->isVarArg()) return InvalidArgument("kernel " + label + " is variadic");
  const std::string kernel_name = kernel->getName().str();

  m.setTargetTriple(triple);
  m.setDataLayout(layout);
  for (const char* md : {"nvvm.annotations", "nvvmir.version", "nvvm.internalize.after.link"}) {
    if (llvm::NamedMDNode* node = m.getNamedMetadata(md)) m.eraseNamedMetadata(node);
  }

  // The host computes the machine functions as GPUs before sm_80 do.
  STITCH_RETURN_IF_ERROR(
      codegen::DefineMachineFunctions(m, /*native=*/false).WithContext("kernel " + label));
  Rewriter rewriter(m, kernel_name);
  STITCH_RETURN_IF_ERROR(rewriter.LowerIntrinsics());
  STITCH_ASSIGN_OR_RETURN(const bool grid_barrier, rewriter.LowerGridBarrier());
  if (grid_barrier) {
    // Threads exchange data through the kernel's writable buffers across the opaque
    // barrier call. A noalias parameter that the kernel does not capture looks private to
    // the optimiser, which would then move its loads and stores across the call.
    for (llvm::Argument& arg : kernel->args()) {
      if (arg.hasNoAliasAttr() && !arg.onlyReadsMemory()) {
        arg.removeAttr(llvm::Attribute::NoAlias);
      }
    }
  }

  // Left-over libdevice references must have a host implementation.
  for (llvm::Function& f : m) {
    if (!f.isDeclaration()) continue;
    const std::string fname = f.getName().str();
    if (fname == "__nvvm_reflect") {
      return Unimplemented("kernel " + label +
                           " calls __nvvm_reflect; link libdevice only "
                           "when lowering to PTX");
    }
    if (fname.rfind("__nv_", 0) == 0 && !HasLibdeviceFunction(fname)) {
      return Unimplemented("kernel " + label + " calls " + fname +
                           ", which has no host implementation in the emulator");
    }
  }

  // A trap would kill the host process: report it as a failed launch instead.
  if (llvm::Function* trap = m.getFunction("llvm.trap")) {
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false);
    llvm::FunctionCallee stop = m.getOrInsertFunction(kTrapName, type);
    if (auto* fn = llvm::dyn_cast<llvm::Function>(stop.getCallee())) {
      fn->setDoesNotReturn();
      fn->setDoesNotThrow();
    }
    trap->replaceAllUsesWith(stop.getCallee());
    trap->eraseFromParent();
  }

  STITCH_ASSIGN_OR_RETURN(SharedLayout shared,
                          PackSharedMemory(m, label, grid_barrier, dynamic_shared_bytes));

  for (llvm::Function& f : m) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    if (f.getCallingConv() == llvm::CallingConv::PTX_Kernel ||
        f.getCallingConv() == llvm::CallingConv::PTX_Device) {
      f.setCallingConv(llvm::CallingConv::C);
    }
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      if (auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
        if (call->getCallingConv() == llvm::CallingConv::PTX_Kernel ||
            call->getCallingConv() == llvm::CallingConv::PTX_Device) {
          call->setCallingConv(llvm::CallingConv::C);
        }
      }
    }
    if (f.isDeclaration() || &f == kernel) continue;
    // Fold helpers into the kernel, so their accesses through kernel parameters are seen
    // by the traffic counters.
    f.removeFnAttr(llvm::Attribute::NoInline);
    f.removeFnAttr(llvm::Attribute::OptimizeNone);
    f.addFnAttr(llvm::Attribute::AlwaysInline);
  }
  // The kernel stays a separate function: its parameters identify global memory.
  kernel->removeFnAttr(llvm::Attribute::AlwaysInline);
  kernel->addFnAttr(llvm::Attribute::NoInline);
  kernel->setLinkage(llvm::GlobalValue::ExternalLinkage);
  BuildEntryThunk(m, kernel);

  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (llvm::verifyModule(m, &os)) {
    return Internal("kernel " + label + ": retargeted module does not verify: " + os.str());
  }

  RetargetedModule out;
  out.kernel_name = kernel_name;
  out.num_params = static_cast<uint32_t>(kernel->arg_size());
  out.shared_bytes = shared.bytes;
  out.shared_align = shared.align;
  out.grid_barrier = grid_barrier;
  out.frame_bytes = StaticFrameBytes(m);
  out.module = std::move(module);
  return out;
}

}  // namespace stitch::emu
