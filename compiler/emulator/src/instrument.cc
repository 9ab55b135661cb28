// Global-memory byte counting. Runs after optimisation, so the counts reflect the accesses
// that remain once redundant loads are gone, as they would on the GPU.
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <vector>

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

// The parameters of `kernel` that `ptr` may point into.
std::vector<unsigned> SourceParameters(const llvm::Value* ptr, const llvm::Function& kernel) {
  llvm::SmallVector<const llvm::Value*, 4> objects;
  llvm::getUnderlyingObjects(ptr, objects, nullptr, /*MaxLookup=*/0);
  std::vector<unsigned> params;
  for (const llvm::Value* o : objects) {
    const auto* arg = llvm::dyn_cast<llvm::Argument>(o);
    if (arg == nullptr || arg->getParent() != &kernel) continue;
    if (std::find(params.begin(), params.end(), arg->getArgNo()) == params.end()) {
      params.push_back(arg->getArgNo());
    }
  }
  return params;
}

// One global access to check: the instruction, its address, its size and direction.
struct Access {
  llvm::Instruction* inst = nullptr;
  llvm::Value* address = nullptr;
  llvm::Value* bytes = nullptr;  // i64
  bool store = false;
  std::vector<unsigned> params;
};

std::vector<Access> GlobalAccesses(llvm::Function& kernel) {
  const llvm::DataLayout& dl = kernel.getParent()->getDataLayout();
  auto* i64 = llvm::Type::getInt64Ty(kernel.getContext());
  auto size_of = [&](llvm::Type* t) {
    return llvm::ConstantInt::get(i64, dl.getTypeStoreSize(t).getFixedValue());
  };
  std::vector<Access> accesses;
  auto add = [&](llvm::Instruction* inst, llvm::Value* address, llvm::Value* bytes, bool store) {
    std::vector<unsigned> params = SourceParameters(address, kernel);
    if (!params.empty()) accesses.push_back({inst, address, bytes, store, std::move(params)});
  };
  for (llvm::Instruction& inst : llvm::instructions(kernel)) {
    if (auto* load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
      add(load, load->getPointerOperand(), size_of(load->getType()), false);
    } else if (auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
      add(store, store->getPointerOperand(), size_of(store->getValueOperand()->getType()), true);
    } else if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&inst)) {
      add(rmw, rmw->getPointerOperand(), size_of(rmw->getType()), true);
    } else if (auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&inst)) {
      add(cas, cas->getPointerOperand(), size_of(cas->getNewValOperand()->getType()), true);
    } else if (auto* mem = llvm::dyn_cast<llvm::MemIntrinsic>(&inst)) {
      llvm::IRBuilder<> b(mem);
      llvm::Value* length = b.CreateZExtOrTrunc(mem->getLength(), i64);
      add(mem, mem->getRawDest(), length, true);
      if (auto* transfer = llvm::dyn_cast<llvm::MemTransferInst>(mem)) {
        add(mem, transfer->getRawSource(), length, false);
      }
    }
  }
  return accesses;
}

// An address as base + index * scale + offset, where the index is a value with constant
// additions, extensions and single-index GEPs stripped: two addresses with the same base,
// index and scale lie `offset` bytes apart.
struct Affine {
  const llvm::Value* base = nullptr;
  const llvm::Value* index = nullptr;
  uint64_t scale = 0;
  int64_t offset = 0;
};

// Strips constant additions (an `or` whose bits cannot carry counts as one) and integer
// extensions from `v`, adding the constants to `offset`. Overflow is not checked: the
// result only pairs a thread's accesses, as the vectorizer would.
const llvm::Value* StripConstantAdds(const llvm::Value* v, const llvm::DataLayout& dl,
                                     int64_t& offset) {
  for (;;) {
    if (llvm::isa<llvm::ZExtInst>(v) || llvm::isa<llvm::SExtInst>(v)) {
      v = llvm::cast<llvm::Instruction>(v)->getOperand(0);
      continue;
    }
    const auto* bo = llvm::dyn_cast<llvm::BinaryOperator>(v);
    if (bo == nullptr) return v;
    const auto* c = llvm::dyn_cast<llvm::ConstantInt>(bo->getOperand(1));
    if (c == nullptr) return v;
    const bool add = bo->getOpcode() == llvm::Instruction::Add;
    const bool disjoint_or = bo->getOpcode() == llvm::Instruction::Or &&
                             llvm::haveNoCommonBitsSet(bo->getOperand(0), bo->getOperand(1), dl);
    if (!add && !disjoint_or) return v;
    offset += c->getSExtValue();
    v = bo->getOperand(0);
  }
}

Affine Decompose(const llvm::Value* ptr, const llvm::DataLayout& dl) {
  Affine a;
  for (;;) {
    const auto* gep = llvm::dyn_cast<llvm::GEPOperator>(ptr);
    if (gep == nullptr) break;
    llvm::APInt constant(dl.getIndexTypeSizeInBits(gep->getType()), 0);
    if (gep->accumulateConstantOffset(dl, constant)) {
      a.offset += constant.getSExtValue();
      ptr = gep->getPointerOperand();
      continue;
    }
    if (a.index != nullptr || gep->getNumIndices() != 1) break;
    const uint64_t scale = dl.getTypeAllocSize(gep->getSourceElementType()).getFixedValue();
    int64_t added = 0;
    a.index = StripConstantAdds(gep->getOperand(1), dl, added);
    a.scale = scale;
    a.offset += added * static_cast<int64_t>(scale);
    ptr = gep->getPointerOperand();
  }
  a.base = ptr;
  return a;
}

// The site of each global load and store (FromParameter) of `kernel`, for sector counting.
// NVPTX's load-store vectorizer turns a thread's accesses of one kind in one basic block that
// lie at constant distances within an aligned window of up to 16 bytes into one vector
// access; the GPU issues them as one warp instruction. The portable IR (and the host's
// optimised copy) keeps them apart, so they are grouped here the same way: an access whose
// alignment is A (at most 16) opens a window of A bytes at its address, and the accesses not
// yet grouped at a constant distance (Decompose) inside it join its site. Windows open in
// order of decreasing alignment, then program order. The first member of a site in program
// order leads it: its execution counts a new warp access.
struct Site {
  uint32_t id = 0;
  bool leader = true;
};

// The metadata that carries an access's site from AnnotateAccessSites through the host's
// optimisation to InstrumentGlobalTraffic.
constexpr const char* kSiteMetadata = "stitch.site";

std::optional<Site> SiteFromMetadata(const llvm::Instruction& inst) {
  const llvm::MDNode* node = inst.getMetadata(kSiteMetadata);
  if (node == nullptr || node->getNumOperands() != 2) return std::nullopt;
  const auto* id = llvm::mdconst::dyn_extract<llvm::ConstantInt>(node->getOperand(0));
  const auto* leader = llvm::mdconst::dyn_extract<llvm::ConstantInt>(node->getOperand(1));
  if (id == nullptr || leader == nullptr) return std::nullopt;
  return Site{static_cast<uint32_t>(id->getZExtValue()), !leader->isZero()};
}

std::unordered_map<llvm::Instruction*, Site> AssignSites(llvm::Function& kernel) {
  const llvm::DataLayout& dl = kernel.getParent()->getDataLayout();
  struct Candidate {
    llvm::Instruction* inst;
    Affine address;
    uint64_t bytes;
    uint64_t align;
    bool store;
  };
  std::unordered_map<llvm::Instruction*, Site> sites;
  uint32_t next = 0;
  for (llvm::BasicBlock& bb : kernel) {
    std::vector<Candidate> accesses;
    for (llvm::Instruction& inst : bb) {
      llvm::Value* ptr = nullptr;
      llvm::Type* type = nullptr;
      uint64_t align = 1;
      bool store = false;
      if (auto* load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
        ptr = load->getPointerOperand();
        type = load->getType();
        align = load->getAlign().value();
      } else if (auto* st = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        ptr = st->getPointerOperand();
        type = st->getValueOperand()->getType();
        align = st->getAlign().value();
        store = true;
      }
      if (ptr == nullptr || !FromParameter(ptr, kernel)) continue;
      accesses.push_back(
          {&inst, Decompose(ptr, dl), dl.getTypeStoreSize(type).getFixedValue(), align, store});
    }
    std::vector<int> group(accesses.size(), -1);
    // Accesses the code as retargeted showed side by side (AnnotateAccessSites) stay together
    // where the host's optimisation has since reassociated their index arithmetic (hoisting
    // `first + 1` out of `i * n + first + 1`, or masking and or-ing a widened index): a
    // recorded follower joins the nearest recorded leader of its site before it in the block,
    // so the copies of an unrolled loop stay apart.
    std::unordered_map<uint32_t, size_t> last_leader;
    for (size_t i = 0; i < accesses.size(); ++i) {
      const std::optional<Site> recorded = SiteFromMetadata(*accesses[i].inst);
      if (!recorded) continue;
      if (recorded->leader) {
        last_leader[recorded->id] = i;
        continue;
      }
      const auto leader = last_leader.find(recorded->id);
      if (leader == last_leader.end()) continue;
      group[leader->second] = static_cast<int>(leader->second);
      group[i] = static_cast<int>(leader->second);
    }
    std::vector<size_t> anchors(accesses.size());
    std::iota(anchors.begin(), anchors.end(), size_t{0});
    std::stable_sort(anchors.begin(), anchors.end(), [&](size_t a, size_t b) {
      return std::min<uint64_t>(accesses[a].align, 16) > std::min<uint64_t>(accesses[b].align, 16);
    });
    for (size_t a : anchors) {
      if (group[a] >= 0) continue;
      group[a] = static_cast<int>(a);
      const Candidate& anchor = accesses[a];
      const uint64_t window = std::min<uint64_t>(anchor.align, 16);
      if (anchor.bytes >= window) continue;
      const Affine& at = anchor.address;
      for (size_t b = 0; b < accesses.size(); ++b) {
        const Candidate& c = accesses[b];
        if (group[b] >= 0 || c.store != anchor.store || c.address.base != at.base ||
            c.address.index != at.index || c.address.scale != at.scale) {
          continue;
        }
        const int64_t d = c.address.offset - at.offset;
        if (d >= 0 && static_cast<uint64_t>(d) + c.bytes <= window) group[b] = static_cast<int>(a);
      }
    }
    // Number the sites in program order; each one's first member leads it.
    std::unordered_map<int, uint32_t> ids;
    for (size_t i = 0; i < accesses.size(); ++i) {
      auto [it, fresh] = ids.try_emplace(group[i], next);
      if (fresh) ++next;
      sites[accesses[i].inst] = {it->second, fresh};
    }
  }
  return sites;
}

}  // namespace

Status InstrumentBoundsChecks(llvm::Module& module, const std::string& kernel_name,
                              const BoundsCheck& check) {
  llvm::Function* kernel = module.getFunction(kernel_name);
  if (kernel == nullptr || kernel->isDeclaration()) {
    return Internal("kernel " + kernel_name + " vanished before instrumentation");
  }
  llvm::LLVMContext& ctx = module.getContext();
  auto* i32 = llvm::Type::getInt32Ty(ctx);
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto constant_ptr = [&](const void* p) {
    return llvm::ConstantExpr::getIntToPtr(
        llvm::ConstantInt::get(i64, reinterpret_cast<uintptr_t>(p)), ptr);
  };
  auto* fail_ty =
      llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, i64, i32, i32}, false);
  for (const Access& a : GlobalAccesses(*kernel)) {
    llvm::IRBuilder<> b(a.inst);
    llvm::Value* begin = b.CreatePtrToInt(a.address, i64);
    llvm::Value* end = b.CreateAdd(begin, a.bytes);
    // Inside the buffer of some parameter the address may derive from.
    llvm::Value* inside = b.getFalse();
    for (unsigned p : a.params) {
      llvm::Value* lo = b.CreateLoad(
          i64, b.CreateConstInBoundsGEP1_64(i64, constant_ptr(check.table), 2 * uint64_t{p}));
      llvm::Value* hi = b.CreateLoad(
          i64, b.CreateConstInBoundsGEP1_64(i64, constant_ptr(check.table), 2 * uint64_t{p} + 1));
      // The end is compared too, so an address that wrapped around is caught as well.
      llvm::Value* ok =
          b.CreateAnd(b.CreateAnd(b.CreateICmpUGE(begin, lo), b.CreateICmpULE(end, hi)),
                      b.CreateICmpUGE(end, begin));
      inside = b.CreateOr(inside, ok);
    }
    llvm::Instruction* then = llvm::SplitBlockAndInsertIfThen(b.CreateNot(inside), a.inst,
                                                              /*Unreachable=*/true);
    llvm::IRBuilder<> fb(then);
    fb.CreateCall(fail_ty, constant_ptr(reinterpret_cast<const void*>(check.fail)),
                  {constant_ptr(check.recorder), begin, a.bytes,
                   llvm::ConstantInt::get(i32, a.params.front()),
                   llvm::ConstantInt::get(i32, a.store ? 1 : 0)});
  }
  return Status::Ok();
}

Status AnnotateAccessSites(llvm::Module& module, const std::string& kernel_name) {
  llvm::Function* kernel = module.getFunction(kernel_name);
  if (kernel == nullptr || kernel->isDeclaration()) {
    return Internal("kernel " + kernel_name + " is missing before its sites are assigned");
  }
  llvm::LLVMContext& ctx = module.getContext();
  auto* i32 = llvm::Type::getInt32Ty(ctx);
  auto* i1 = llvm::Type::getInt1Ty(ctx);
  for (const auto& [inst, site] : AssignSites(*kernel)) {
    llvm::Metadata* fields[] = {
        llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, site.id)),
        llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i1, site.leader ? 1 : 0))};
    inst->setMetadata(kSiteMetadata, llvm::MDNode::get(ctx, fields));
  }
  return Status::Ok();
}

Status InstrumentGlobalTraffic(llvm::Module& module, const std::string& kernel_name,
                               uint64_t* counters, FootprintFn footprint, void* recorder,
                               SectorFn sectors, uint32_t* sites) {
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
  auto* sector_ty =
      llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, ptr, i64, i32, i32}, false);
  std::unordered_map<llvm::Instruction*, Site> site_of;
  if (sectors != nullptr) site_of = AssignSites(*kernel);
  uint32_t num_sites = 0;
  for (const auto& [inst, site] : site_of) num_sites = std::max(num_sites, site.id + 1);
  auto report = [&](llvm::Instruction* at, llvm::Value* address, uint64_t bytes, int store) {
    if (footprint == nullptr && sectors == nullptr) return;
    llvm::IRBuilder<> b(at);
    auto as_ptr = [&](const void* p) {
      return llvm::ConstantExpr::getIntToPtr(
          llvm::ConstantInt::get(i64, reinterpret_cast<uintptr_t>(p)), ptr);
    };
    llvm::Value* address_ptr = b.CreatePointerCast(address, ptr);
    if (footprint != nullptr) {
      b.CreateCall(footprint_ty, as_ptr(reinterpret_cast<const void*>(footprint)),
                   {as_ptr(recorder), address_ptr, llvm::ConstantInt::get(i64, bytes),
                    llvm::ConstantInt::get(i32, store)});
    }
    if (sectors != nullptr) {
      const Site site = site_of.at(at);
      b.CreateCall(sector_ty, as_ptr(reinterpret_cast<const void*>(sectors)),
                   {as_ptr(recorder), address_ptr, llvm::ConstantInt::get(i64, bytes),
                    llvm::ConstantInt::get(i32, store),
                    llvm::ConstantInt::get(i32, site.id | (site.leader ? 0 : kSiteFollower))});
    }
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
  if (sites != nullptr) *sites = num_sites;
  return Status::Ok();
}

}  // namespace stitch::emu
