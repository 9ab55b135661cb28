#include "stitch/compiler/emulator.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstring>
#include <unordered_map>

#include "emulator/block_scheduler.h"
#include "emulator/jit.h"
#include "emulator/retarget.h"
#include "emulator/runtime.h"

namespace stitch {
namespace {

// Each fiber's stack. JIT-compiled kernel frames are small; the check on static allocas
// below keeps a kernel with large local arrays from overflowing into the guard page.
constexpr size_t kStackBytes = 64 * 1024;
constexpr uint64_t kMaxFrameBytes = 32 * 1024;
constexpr uint64_t kMaxBlockThreads = 1024;

struct LoadedKernel {
  emu::EntryFn entry = nullptr;
  uint32_t num_params = 0;
  uint8_t* shared = nullptr;
  uint64_t shared_bytes = 0;
};

class EmulatorImpl final : public Emulator {
 public:
  EmulatorImpl(const EmulatorOptions& options, std::unique_ptr<emu::Jit> jit)
      : options_(options),
        jit_(std::move(jit)),
        scheduler_(kStackBytes, options.random_order, options.seed) {}

  StatusOr<LaunchStats> Launch(const CompiledKernel& kernel,
                               const std::vector<void*>& args) override {
    STITCH_ASSIGN_OR_RETURN(const LoadedKernel* loaded, GetOrCompile(kernel));
    if (args.size() != loaded->num_params) {
      return InvalidArgument("kernel " + kernel.name + " takes " +
                             std::to_string(loaded->num_params) + " argument(s), got " +
                             std::to_string(args.size()));
    }
    const LaunchDims& dims = kernel.launch;
    for (int i = 0; i < 3; ++i) {
      if (dims.grid[i] == 0 || dims.block[i] == 0) {
        return InvalidArgument("kernel " + kernel.name + " has an empty launch dimension");
      }
    }
    const uint64_t block_threads = uint64_t{dims.block[0]} * dims.block[1] * dims.block[2];
    if (block_threads > kMaxBlockThreads) {
      return InvalidArgument("kernel " + kernel.name + " launches " +
                             std::to_string(block_threads) + " threads per block (at most " +
                             std::to_string(kMaxBlockThreads) + ")");
    }

    counters_[0] = counters_[1] = 0;
    const uint64_t barriers_before = scheduler_.barriers();
    std::vector<void*> arg_copy = args;
    emu::BlockGeometry geometry;
    geometry.ntid = dims.block;
    geometry.nctaid = dims.grid;
    for (uint32_t z = 0; z < dims.grid[2]; ++z) {
      for (uint32_t y = 0; y < dims.grid[1]; ++y) {
        for (uint32_t x = 0; x < dims.grid[0]; ++x) {
          geometry.ctaid = {x, y, z};
          if (loaded->shared != nullptr) {
            // Shared memory starts undefined on the GPU: zero it, or in random-order mode
            // fill it with NaN/-1 bytes so reads before writes show up.
            std::memset(loaded->shared, options_.random_order ? 0xff : 0, loaded->shared_bytes);
          }
          STITCH_RETURN_IF_ERROR(scheduler_.RunBlock(loaded->entry, arg_copy.data(), geometry));
        }
      }
    }
    LaunchStats stats;
    stats.global_bytes_loaded = counters_[0];
    stats.global_bytes_stored = counters_[1];
    stats.barriers = scheduler_.barriers() - barriers_before;
    stats.threads = dims.threads();
    return stats;
  }

 private:
  StatusOr<const LoadedKernel*> GetOrCompile(const CompiledKernel& kernel) {
    std::string key = kernel.name;
    key.push_back('\0');
    key += kernel.portable_ir;
    if (auto it = cache_.find(key); it != cache_.end()) return it->second.get();

    auto context = std::make_unique<llvm::LLVMContext>();
    STITCH_ASSIGN_OR_RETURN(emu::RetargetedModule rm,
                            emu::Retarget(*context, kernel.portable_ir, kernel.name, jit_->triple(),
                                          jit_->data_layout()));
    if (rm.frame_bytes > kMaxFrameBytes) {
      return ResourceExhausted("kernel " + kernel.name + " needs " +
                               std::to_string(rm.frame_bytes) +
                               " bytes of local memory per thread; the emulator allows " +
                               std::to_string(kMaxFrameBytes));
    }
    jit_->Optimize(*rm.module);
    STITCH_RETURN_IF_ERROR(emu::InstrumentGlobalTraffic(*rm.module, rm.kernel_name, counters_));
    uint64_t shared_addr = 0;
    STITCH_ASSIGN_OR_RETURN(uint64_t entry,
                            jit_->Load(std::move(rm.module), std::move(context), emu::kEntryName,
                                       rm.shared_bytes != 0 ? emu::kSharedName : "", &shared_addr));
    auto loaded = std::make_unique<LoadedKernel>();
    loaded->entry = reinterpret_cast<emu::EntryFn>(static_cast<uintptr_t>(entry));
    loaded->num_params = rm.num_params;
    loaded->shared = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(shared_addr));
    loaded->shared_bytes = rm.shared_bytes;
    const LoadedKernel* out = loaded.get();
    cache_.emplace(std::move(key), std::move(loaded));
    return out;
  }

  EmulatorOptions options_;
  std::unique_ptr<emu::Jit> jit_;
  emu::BlockScheduler scheduler_;
  uint64_t counters_[2] = {0, 0};  // global bytes loaded, stored; updated by kernel code
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> cache_;
};

}  // namespace

StatusOr<std::unique_ptr<Emulator>> Emulator::Create(const EmulatorOptions& options) {
  STITCH_ASSIGN_OR_RETURN(std::unique_ptr<emu::Jit> jit, emu::Jit::Create());
  return std::unique_ptr<Emulator>(new EmulatorImpl(options, std::move(jit)));
}

}  // namespace stitch
