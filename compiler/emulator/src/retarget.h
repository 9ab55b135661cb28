// Rewrites a kernel's portable (NVPTX) module so it runs on the host under the emulator
// runtime, and instruments its global-memory traffic.
//
// Thread-safety: the functions are reentrant; each works on the module it is given, which
// must not be used concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stitch/base/status.h"

namespace llvm {
class DataLayout;
class LLVMContext;
class Module;
}  // namespace llvm

namespace stitch::emu {

struct RetargetedModule {
  std::unique_ptr<llvm::Module> module;
  std::string kernel_name;
  uint32_t num_params = 0;
  uint64_t shared_bytes = 0;  // size of the packed shared-memory global (0: none)
  uint64_t shared_align = 16;
  uint64_t frame_bytes = 0;  // static allocas, a lower bound of the kernel's stack use
  // The kernel calls the grid-wide barrier: its blocks must run at once, and its shared
  // memory is per block (no shared-memory global; see kSharedBaseName).
  bool grid_barrier = false;
};

// Parses `bitcode` into `ctx` and rewrites it for `triple`/`layout`: NVVM intrinsics and
// the grid barrier become runtime calls, addrspace(3) globals are packed into one host
// global (or, with a grid barrier, into offsets of a per-block buffer), the dynamic one
// (`extern __shared__`) at `dynamic_shared_bytes`, an entry thunk
// `__stitch_emu_entry(void** args)` is added. `name` picks the kernel (falls back to the
// module's only kernel when empty). Returns INVALID_ARGUMENT for bitcode that does not
// parse or has no such kernel, or that defines the grid barrier or gives it another type
// than codegen.h's contract, or declares dynamic shared memory without dynamic shared bytes,
// UNIMPLEMENTED for intrinsics or libdevice functions the
// emulator lacks, INTERNAL when the rewritten module does not verify.
StatusOr<RetargetedModule> Retarget(llvm::LLVMContext& ctx, const std::string& bitcode,
                                    const std::string& name, uint64_t dynamic_shared_bytes,
                                    const std::string& triple, const llvm::DataLayout& layout);

// Adds the size of every load (store) whose address derives from a parameter of
// `kernel_name` to counters[0] (counters[1]). `counters` must outlive the compiled code.
// Returns INTERNAL when the kernel is missing.
// Receives every global access when footprints are counted: `recorder` is the value given
// to InstrumentGlobalTraffic, `store` is 0 for a load and 1 for a store.
using FootprintFn = void (*)(void* recorder, const void* address, uint64_t bytes, uint32_t store);

// Receives every global load and store when sector traffic is counted, as FootprintFn does,
// with `site`, the access's static site: the warp instruction the GPU would issue for it.
// A thread's loads (stores) in one basic block at constant distances inside an aligned
// window of up to 16 bytes share a site, as NVPTX's load-store vectorizer makes one vector
// access of them; sites are numbered 0, 1, ... in program order. The first member of a site
// executed in a pass leads it; the others carry kSiteFollower in `site`, and belong to the
// warp access the leader began.
inline constexpr uint32_t kSiteFollower = uint32_t{1} << 31;
using SectorFn = void (*)(void* recorder, const void* address, uint64_t bytes, uint32_t store,
                          uint32_t site);

// Records the site of each global load and store of `kernel_name` (see SectorFn) on the
// instruction, as metadata that InstrumentGlobalTraffic reads: sites are assigned on the code
// as retargeted, before the host's optimisation reassociates the index arithmetic that shows
// a thread's accesses side by side. Returns INTERNAL when the kernel is missing.
Status AnnotateAccessSites(llvm::Module& module, const std::string& kernel_name);

// `footprint` (`sectors`) and `recorder` are null unless each access is to be reported to
// `footprint` (`sectors`). When `sectors` is given, `*sites` receives the number of sites.
Status InstrumentGlobalTraffic(llvm::Module& module, const std::string& kernel_name,
                               uint64_t* counters, FootprintFn footprint = nullptr,
                               void* recorder = nullptr, SectorFn sectors = nullptr,
                               uint32_t* sites = nullptr);

// Bounds checks. `table` holds two words per parameter of the kernel, the first byte of its
// buffer and the byte past its end; an access whose bytes lie outside the buffers of every
// parameter its address may derive from calls `fail` instead of accessing memory. `fail`
// must not return. The table's contents may change between launches; its address is baked
// into the code, so it must outlive the compiled kernel.
using OutOfBoundsFn = void (*)(void* recorder, uint64_t address, uint64_t bytes, uint32_t param,
                               uint32_t store);
struct BoundsCheck {
  const uint64_t* table = nullptr;
  OutOfBoundsFn fail = nullptr;
  void* recorder = nullptr;
};

// Adds the checks above to every global load, store, atomic and memory intrinsic of
// `kernel_name` whose address derives from a parameter. Returns INTERNAL when the kernel is
// missing.
Status InstrumentBoundsChecks(llvm::Module& module, const std::string& kernel_name,
                              const BoundsCheck& check);

}  // namespace stitch::emu
