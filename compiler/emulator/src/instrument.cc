// Global-memory byte counting. Runs after optimisation, so the counts reflect the accesses
// that remain once redundant loads are gone, as they would on the GPU.
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include "retarget.h"

namespace stitch::emu {
namespace {

// True when some object `ptr` may point into is a parameter of `kernel`. Looks through
// GEPs, casts, selects and phis; an address mixing a parameter with other objects counts.
bool FromParameter(const llvm::Value* ptr, const llvm::Function& kernel) {
  llvm::SmallVector<const llvm::Value*, 4> objects;
  llvm::getUnderlyingObjects(ptr, objects, nullptr, /*MaxLookup=*/0);
  for (const llvm::Value* o : objects) {
    if (const auto* arg = llvm::dyn_cast<llvm::Argument>(o)) {
      if (arg->getParent() == &kernel) return true;
    }
  }
  return false;
}

}  // namespace

Status InstrumentGlobalTraffic(llvm::Module& module, const std::string& kernel_name,
                               uint64_t* counters, FootprintFn footprint, void* recorder) {
  llvm::Function* kernel = module.getFunction(kernel_name);
  if (kernel == nullptr || kernel->isDeclaration()) {
    return Internal("kernel " + kernel_name + " vanished before instrumentation");
  }
  const llvm::DataLayout& dl = module.getDataLayout();
  llvm::LLVMContext& ctx = module.getContext();
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  // The counters live in the Emulator; the compiled code is private to it, so their
  // address is baked in as a constant.
  llvm::Constant* counter_addr[2] = {
      llvm::ConstantExpr::getIntToPtr(
          llvm::ConstantInt::get(i64, reinterpret_cast<uintptr_t>(&counters[0])), ptr),
      llvm::ConstantExpr::getIntToPtr(
          llvm::ConstantInt::get(i64, reinterpret_cast<uintptr_t>(&counters[1])), ptr)};

  auto bump = [&](llvm::IRBuilder<>& b, int which, llvm::Value* bytes) {
    llvm::LoadInst* old = b.CreateLoad(i64, counter_addr[which]);
    b.CreateStore(b.CreateAdd(old, bytes), counter_addr[which]);
  };

  auto* i32 = llvm::Type::getInt32Ty(ctx);
  auto* footprint_ty =
      llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, ptr, i64, i32}, false);
  auto report = [&](llvm::Instruction* at, llvm::Value* address, uint64_t bytes, int store) {
    if (footprint == nullptr) return;
    llvm::IRBuilder<> b(at);
    auto as_ptr = [&](const void* p) {
      return llvm::ConstantExpr::getIntToPtr(
          llvm::ConstantInt::get(i64, reinterpret_cast<uintptr_t>(p)), ptr);
    };
    b.CreateCall(footprint_ty, as_ptr(reinterpret_cast<const void*>(footprint)),
                 {as_ptr(recorder), b.CreatePointerCast(address, ptr),
                  llvm::ConstantInt::get(i64, bytes), llvm::ConstantInt::get(i32, store)});
  };

  for (llvm::BasicBlock& bb : *kernel) {
    // Fixed-size accesses of one block are summed and counted once at its end.
    uint64_t loaded = 0, stored = 0;
    std::vector<std::pair<llvm::Instruction*, std::pair<int, llvm::Value*>>> dynamic;
    for (llvm::Instruction& inst : bb) {
      if (auto* load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
        if (FromParameter(load->getPointerOperand(), *kernel)) {
          const uint64_t n = dl.getTypeStoreSize(load->getType()).getFixedValue();
          loaded += n;
          report(load, load->getPointerOperand(), n, 0);
        }
      } else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        if (FromParameter(store->getPointerOperand(), *kernel)) {
          const uint64_t n =
              dl.getTypeStoreSize(store->getValueOperand()->getType()).getFixedValue();
          stored += n;
          report(store, store->getPointerOperand(), n, 1);
        }
      } else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&inst)) {
        if (FromParameter(rmw->getPointerOperand(), *kernel)) {
          const uint64_t n = dl.getTypeStoreSize(rmw->getType()).getFixedValue();
          loaded += n;
          stored += n;
        }
      } else if (auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&inst)) {
        if (FromParameter(cas->getPointerOperand(), *kernel)) {
          const uint64_t n =
              dl.getTypeStoreSize(cas->getNewValOperand()->getType()).getFixedValue();
          loaded += n;
          stored += n;
        }
      } else if (auto* mem = llvm::dyn_cast<llvm::MemIntrinsic>(&inst)) {
        if (FromParameter(mem->getRawDest(), *kernel)) {
          dynamic.push_back({&inst, {1, mem->getLength()}});
        }
        if (auto* transfer = llvm::dyn_cast<llvm::MemTransferInst>(mem)) {
          if (FromParameter(transfer->getRawSource(), *kernel)) {
            dynamic.push_back({&inst, {0, transfer->getLength()}});
          }
        }
      }
    }
    for (auto& [inst, what] : dynamic) {
      llvm::IRBuilder<> b(inst);
      bump(b, what.first, b.CreateZExtOrTrunc(what.second, i64));
    }
    if (loaded == 0 && stored == 0) continue;
    llvm::IRBuilder<> b(bb.getTerminator());
    if (loaded != 0) bump(b, 0, llvm::ConstantInt::get(i64, loaded));
    if (stored != 0) bump(b, 1, llvm::ConstantInt::get(i64, stored));
  }
  return Status::Ok();
}

}  // namespace stitch::emu
