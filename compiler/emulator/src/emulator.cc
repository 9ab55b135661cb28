#include "stitch/emulator/emulator.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <unordered_map>
#include <unordered_set>

#include "block_scheduler.h"
#include "jit.h"
#include "retarget.h"
#include "runtime.h"
#include "sector_counter.h"

namespace stitch {
namespace {

// Each fiber's stack. JIT-compiled kernel frames are small; the check on static allocas
// below keeps a kernel with large local arrays from overflowing into the guard page.
constexpr size_t kStackBytes = 64 * 1024;
constexpr uint64_t kMaxFrameBytes = 32 * 1024;
constexpr uint64_t kMaxBlockThreads = 1024;
// A kernel with a grid barrier keeps every thread of its grid alive at once, each with its
// own fiber stack (a few KiB of it resident; see BlockScheduler::RunGrid), and every block
// with its own shared memory.
constexpr uint64_t kMaxGridBarrierThreads = 64 * 1024;
constexpr uint64_t kMaxGridSharedBytes = uint64_t{256} << 20;

struct LoadedKernel {
  emu::EntryFn entry = nullptr;
  uint32_t num_params = 0;
  uint8_t* shared = nullptr;
  uint64_t shared_bytes = 0;
  uint64_t shared_align = 16;
  bool grid_barrier = false;
  uint32_t sites = 0;  // instrumented accesses, with EmulatorOptions::count_sectors
  // Two words per parameter, [begin, end) of its buffer in the current launch; the
  // instrumented code reads it (retarget.h's BoundsCheck).
  std::unique_ptr<uint64_t[]> bounds;
  std::vector<std::string> param_names;  // the kernel's own, for errors
};

// "(x,y,z)".
std::string Triple(const std::array<uint32_t, 3>& v) {
  return "(" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + ")";
}

// The id of block `linear` (x + y * grid.x + z * grid.x * grid.y) of `grid`.
std::array<uint32_t, 3> BlockId(const std::array<uint32_t, 3>& grid, uint64_t linear) {
  const uint64_t plane = uint64_t{grid[0]} * grid[1];
  return {static_cast<uint32_t>(linear % grid[0]),
          static_cast<uint32_t>(linear / grid[0] % grid[1]), static_cast<uint32_t>(linear / plane)};
}

// The number of blocks a launch runs, and the linear index of the i-th: those listed, or
// the whole grid in order.
uint64_t BlockCount(const LaunchDims& dims, const std::vector<uint64_t>& listed) {
  return listed.empty() ? dims.blocks() : listed.size();
}
uint64_t LinearBlock(const std::vector<uint64_t>& listed, uint64_t i) {
  return listed.empty() ? i : listed[i];
}

class EmulatorImpl final : public Emulator {
 public:
  EmulatorImpl(const EmulatorOptions& options, std::unique_ptr<emu::Jit> jit)
      : options_(options),
        jit_(std::move(jit)),
        scheduler_(kStackBytes, options.random_order, options.seed) {}

  StatusOr<LaunchStats> Launch(const CompiledKernel& kernel, const std::vector<void*>& args,
                               const LaunchOptions& options) override {
    STITCH_ASSIGN_OR_RETURN(LoadedKernel * loaded, GetOrCompile(kernel));
    emu::SetApproximateMathError(options_.approximate_math_error);
    if (args.size() != loaded->num_params) {
      return InvalidArgument("kernel " + kernel.name + " takes " +
                             std::to_string(loaded->num_params) + " argument(s), got " +
                             std::to_string(args.size()));
    }
    // The workspace is the last pointer argument, followed only by a shape-generic kernel's
    // extent (codegen.h); the GPU hands out 256-byte-aligned allocations.
    const uint8_t* workspace = nullptr;
    if (kernel.workspace_bytes != 0) {
      const size_t after = kernel.takes_outer_extent ? 1 : 0;
      if (args.size() <= after) {
        return InvalidArgument("kernel " + kernel.name + " has a " +
                               std::to_string(kernel.workspace_bytes) +
                               "-byte workspace but takes no arguments");
      }
      workspace = static_cast<const uint8_t*>(args[args.size() - 1 - after]);
      if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0) {
        return InvalidArgument("kernel " + kernel.name + ": its workspace (the last pointer " +
                               "argument) is not " + std::to_string(kWorkspaceAlignment) +
                               "-byte aligned");
      }
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
    STITCH_RETURN_IF_ERROR(CheckOptions(kernel, *loaded, options));
    SetBounds(*loaded, args, options);

    counters_[0] = counters_[1] = 0;
    sectors_[0].clear();
    sectors_[1].clear();
    footprint_[0] = footprint_[1] = 0;
    const uint64_t barriers_before = scheduler_.barriers();
    const uint64_t grid_barriers_before = scheduler_.grid_barriers();
    phase_grid_barriers_ = grid_barriers_before;
    if (options_.count_sectors) {
      const uint64_t warps_per_block = (block_threads + emu::kWarpSize - 1) / emu::kWarpSize;
      const uint64_t blocks_at_once = loaded->grid_barrier ? BlockCount(dims, options.blocks) : 1;
      sector_counter_.StartLaunch(options_.reuse_window_bytes,
                                  static_cast<uint32_t>(warps_per_block * blocks_at_once),
                                  loaded->sites);
      sector_grid_barriers_ = grid_barriers_before;
    }
    std::vector<void*> arg_copy = args;
    emu::BlockGeometry geometry;
    geometry.ntid = dims.block;
    geometry.nctaid = dims.grid;
    if (loaded->grid_barrier) {
      STITCH_RETURN_IF_ERROR(
          LaunchGrid(kernel, *loaded, geometry, options.blocks, arg_copy.data()));
    } else {
      STITCH_RETURN_IF_ERROR(LaunchBlocks(*loaded, geometry, options.blocks, arg_copy.data()));
    }
    LaunchStats stats;
    stats.global_bytes_loaded = counters_[0];
    stats.global_bytes_stored = counters_[1];
    ClosePhase();
    stats.footprint_bytes_loaded = footprint_[0];
    stats.footprint_bytes_stored = footprint_[1];
    if (options_.count_sectors) {
      sector_counter_.Flush();
      stats.sector_loads = sector_counter_.loads();
      stats.sector_stores = sector_counter_.stores();
    }
    stats.barriers = scheduler_.barriers() - barriers_before;
    stats.grid_barriers = scheduler_.grid_barriers() - grid_barriers_before;
    stats.threads = dims.threads();
    stats.blocks_run = BlockCount(dims, options.blocks);
    return stats;
  }

 private:
  // Runs the blocks (`listed`, or all) one after another, sharing the module's shared-memory
  // global.
  Status LaunchBlocks(const LoadedKernel& loaded, emu::BlockGeometry geometry,
                      const std::vector<uint64_t>& listed, void** args) {
    const LaunchDims dims{geometry.nctaid, geometry.ntid};
    for (uint64_t i = 0; i < BlockCount(dims, listed); ++i) {
      geometry.ctaid = BlockId(geometry.nctaid, LinearBlock(listed, i));
      if (loaded.shared != nullptr) {
        // Shared memory starts undefined on the GPU: zero it, or in random-order mode fill it
        // with NaN/-1 bytes so reads before writes show up.
        std::memset(loaded.shared, SharedFill(), loaded.shared_bytes);
      }
      if (options_.count_sectors) sector_counter_.StartBlock();
      STITCH_RETURN_IF_ERROR(scheduler_.RunBlock(loaded.entry, args, geometry));
      if (options_.count_sectors) sector_counter_.Flush();
    }
    return Status::Ok();
  }

  // Checks that the launch options fit the kernel.
  static Status CheckOptions(const CompiledKernel& kernel, const LoadedKernel& loaded,
                             const LaunchOptions& options) {
    const std::string k = "kernel " + kernel.name;
    if (!options.arg_bytes.empty() && options.arg_bytes.size() != loaded.num_params) {
      return InvalidArgument(k + " takes " + std::to_string(loaded.num_params) +
                             " argument(s), but " + std::to_string(options.arg_bytes.size()) +
                             " buffer sizes were given");
    }
    if (!options.arg_names.empty() && options.arg_names.size() != loaded.num_params) {
      return InvalidArgument(k + " takes " + std::to_string(loaded.num_params) +
                             " argument(s), but " + std::to_string(options.arg_names.size()) +
                             " buffer names were given");
    }
    const uint64_t total = kernel.launch.blocks();
    for (size_t i = 0; i < options.blocks.size(); ++i) {
      const uint64_t b = options.blocks[i];
      if (b >= total) {
        return InvalidArgument(k + ": block " + std::to_string(b) + " is outside its grid of " +
                               std::to_string(total) + " blocks");
      }
      if (std::count(options.blocks.begin(), options.blocks.begin() + i, b) != 0) {
        return InvalidArgument(k + ": block " + std::to_string(b) + " is listed twice");
      }
    }
    return Status::Ok();
  }

  // Points the kernel's bounds table at this launch's buffers, or lets every access pass.
  void SetBounds(LoadedKernel& loaded, const std::vector<void*>& args,
                 const LaunchOptions& options) {
    for (uint32_t p = 0; p < loaded.num_params; ++p) {
      uint64_t begin = 0, end = std::numeric_limits<uint64_t>::max();
      if (!options.arg_bytes.empty()) {
        begin = reinterpret_cast<uintptr_t>(args[p]);
        end = begin + options.arg_bytes[p];
      }
      loaded.bounds[2 * p] = begin;
      loaded.bounds[2 * p + 1] = end;
    }
    checked_ = &loaded;
    checked_names_ = &options.arg_names;
  }

  // Says which access left which buffer, and by how much.
  std::string DescribeOutOfBounds(const emu::ThreadState& t, uint64_t address, uint64_t bytes,
                                  uint32_t param, uint32_t store) const {
    const LoadedKernel& k = *checked_;
    const uint64_t begin = k.bounds[2 * param];
    const uint64_t end = k.bounds[2 * param + 1];
    const std::string& name =
        checked_names_->empty() ? k.param_names[param] : (*checked_names_)[param];
    std::string where;
    if (address < begin) {
      where = std::to_string(begin - address) + " byte(s) before its start";
    } else {
      where = "at byte offset " + std::to_string(address - begin) + ", " +
              std::to_string(address + bytes - end) + " byte(s) past its end";
    }
    return "thread " + Triple(t.tid) + ": out of bounds: " + std::to_string(bytes) + "-byte " +
           (store ? "store" : "load") + " to argument " + std::to_string(param) + " (" + name +
           ", " + std::to_string(end - begin) + " bytes) " + where;
  }

  // Called by instrumented code, on the offending thread's fiber, for an access outside its
  // buffer: fails the launch with where and what it was. The fiber never returns, so its
  // frames are never unwound: the message is built in a call of its own, whose temporaries
  // are gone before Fail, which releases the message itself.
  [[noreturn]] static void OutOfBounds(void* self, uint64_t address, uint64_t bytes, uint32_t param,
                                       uint32_t store) {
    auto* impl = static_cast<EmulatorImpl*>(self);
    emu::ThreadState* t = emu::BlockScheduler::Current();
    std::string message = impl->DescribeOutOfBounds(*t, address, bytes, param, store);
    t->scheduler->Fail(t, std::move(message));
  }

  // Runs every block at once (the kernel synchronises its grid), each with its own shared
  // memory.
  Status LaunchGrid(const CompiledKernel& kernel, const LoadedKernel& loaded,
                    const emu::BlockGeometry& geometry, const std::vector<uint64_t>& listed,
                    void** args) {
    const LaunchDims dims{geometry.nctaid, geometry.ntid};
    const uint64_t blocks = BlockCount(dims, listed);
    const uint64_t threads = blocks * geometry.ntid[0] * geometry.ntid[1] * geometry.ntid[2];
    if (threads > kMaxGridBarrierThreads) {
      return ResourceExhausted("kernel " + kernel.name + " uses a grid barrier and launches " +
                               std::to_string(threads) + " threads; the emulator runs at most " +
                               std::to_string(kMaxGridBarrierThreads) + " of them at once");
    }
    std::unique_ptr<uint8_t[]> storage;
    uint8_t* shared = nullptr;
    uint64_t stride = 0;
    if (loaded.shared_bytes != 0) {
      const uint64_t align = std::max<uint64_t>(loaded.shared_align, 16);
      stride = (loaded.shared_bytes + align - 1) / align * align;
      if (stride * blocks > kMaxGridSharedBytes) {
        return ResourceExhausted("kernel " + kernel.name + " uses a grid barrier and needs " +
                                 std::to_string(stride * blocks) +
                                 " bytes of shared memory over its blocks; the emulator allows " +
                                 std::to_string(kMaxGridSharedBytes));
      }
      const size_t bytes = static_cast<size_t>(stride * blocks + align);
      storage.reset(new (std::nothrow) uint8_t[bytes]);
      if (storage == nullptr) {
        return ResourceExhausted("cannot allocate shared memory for kernel " + kernel.name);
      }
      const uintptr_t raw = reinterpret_cast<uintptr_t>(storage.get());
      shared = storage.get() + ((align - raw % align) % align);
      std::memset(shared, SharedFill(), static_cast<size_t>(stride * blocks));
    }
    std::vector<std::array<uint32_t, 3>> block_ids;
    for (uint64_t i = 0; i < blocks; ++i) {
      block_ids.push_back(BlockId(geometry.nctaid, LinearBlock(listed, i)));
    }
    return scheduler_.RunGrid(loaded.entry, args, geometry, block_ids, shared, stride);
  }

  int SharedFill() const { return options_.random_order ? 0xff : 0; }

  StatusOr<LoadedKernel*> GetOrCompile(const CompiledKernel& kernel) {
    std::string key = kernel.name;
    key.push_back('\0');
    key += std::to_string(kernel.dynamic_shared_bytes);
    key.push_back('\0');
    key += kernel.portable_ir;
    if (auto it = cache_.find(key); it != cache_.end()) return it->second.get();

    auto context = std::make_unique<llvm::LLVMContext>();
    STITCH_ASSIGN_OR_RETURN(
        emu::RetargetedModule rm,
        emu::Retarget(*context, kernel.portable_ir, kernel.name, kernel.dynamic_shared_bytes,
                      jit_->triple(), jit_->data_layout()));
    if (rm.frame_bytes > kMaxFrameBytes) {
      return ResourceExhausted("kernel " + kernel.name + " needs " +
                               std::to_string(rm.frame_bytes) +
                               " bytes of local memory per thread; the emulator allows " +
                               std::to_string(kMaxFrameBytes));
    }
    if (options_.count_sectors) {
      STITCH_RETURN_IF_ERROR(emu::AnnotateAccessSites(*rm.module, rm.kernel_name));
    }
    jit_->Optimize(*rm.module);
    uint32_t sites = 0;
    STITCH_RETURN_IF_ERROR(emu::InstrumentGlobalTraffic(
        *rm.module, rm.kernel_name, counters_,
        options_.count_footprint ? &EmulatorImpl::Touch : nullptr, this,
        options_.count_sectors ? &EmulatorImpl::Sector : nullptr, &sites));
    auto loaded = std::make_unique<LoadedKernel>();
    loaded->bounds = std::make_unique<uint64_t[]>(2 * size_t{rm.num_params});
    STITCH_RETURN_IF_ERROR(emu::InstrumentBoundsChecks(
        *rm.module, rm.kernel_name, {loaded->bounds.get(), &EmulatorImpl::OutOfBounds, this}));
    for (const llvm::Argument& arg : rm.module->getFunction(rm.kernel_name)->args()) {
      loaded->param_names.push_back(arg.getName().empty()
                                        ? "argument " + std::to_string(arg.getArgNo())
                                        : arg.getName().str());
    }
    uint64_t shared_addr = 0;
    // A grid-barrier kernel has no shared-memory global: its blocks own their buffers.
    const bool shared_global = rm.shared_bytes != 0 && !rm.grid_barrier;
    STITCH_ASSIGN_OR_RETURN(uint64_t entry,
                            jit_->Load(std::move(rm.module), std::move(context), emu::kEntryName,
                                       shared_global ? emu::kSharedName : "", &shared_addr));
    loaded->entry = reinterpret_cast<emu::EntryFn>(static_cast<uintptr_t>(entry));
    loaded->num_params = rm.num_params;
    loaded->shared = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(shared_addr));
    loaded->shared_bytes = rm.shared_bytes;
    loaded->shared_align = rm.shared_align;
    loaded->grid_barrier = rm.grid_barrier;
    loaded->sites = sites;
    LoadedKernel* out = loaded.get();
    cache_.emplace(std::move(key), std::move(loaded));
    return out;
  }

  EmulatorOptions options_;
  std::unique_ptr<emu::Jit> jit_;
  emu::BlockScheduler scheduler_;
  uint64_t counters_[2] = {0, 0};  // global bytes loaded, stored; updated by kernel code

  // DRAM moves 32-byte sectors: the footprint is the set of sectors touched, per phase
  // between grid barriers (emulator.h).
  static constexpr uint64_t kSectorBytes = 32;
  static constexpr uint64_t kWorkspaceAlignment = 256;
  static void Touch(void* self, const void* address, uint64_t bytes, uint32_t store) {
    auto* impl = static_cast<EmulatorImpl*>(self);
    // Every thread reaches a grid barrier before it is released, so the first access that
    // sees a new count is the first of the next phase.
    if (impl->scheduler_.grid_barriers() != impl->phase_grid_barriers_) impl->ClosePhase();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
    const uint64_t first = begin / kSectorBytes;
    const uint64_t last = (begin + bytes - 1) / kSectorBytes;
    for (uint64_t s = first; s <= last; ++s) impl->sectors_[store ? 1 : 0].insert(s);
  }
  // Adds the current phase's sectors to the launch's footprint and starts the next phase.
  void ClosePhase() {
    for (int k = 0; k < 2; ++k) {
      footprint_[k] += sectors_[k].size() * kSectorBytes;
      sectors_[k].clear();
    }
    phase_grid_barriers_ = scheduler_.grid_barriers();
  }
  // Called by instrumented code for every global load and store with count_sectors.
  static void Sector(void* self, const void* address, uint64_t bytes, uint32_t store,
                     uint32_t site) {
    auto* impl = static_cast<EmulatorImpl*>(self);
    // The warp accesses of a grid-wide launch's phase are ordered among themselves, so each
    // phase's go through the cache before the next phase's.
    if (impl->scheduler_.grid_barriers() != impl->sector_grid_barriers_) {
      impl->sector_counter_.Flush();
      impl->sector_grid_barriers_ = impl->scheduler_.grid_barriers();
    }
    const emu::ThreadState* t = emu::BlockScheduler::Current();
    impl->sector_counter_.Record(t->warp, t->linear % emu::kWarpSize, site, store != 0,
                                 reinterpret_cast<uintptr_t>(address), bytes);
  }
  emu::SectorCounter sector_counter_;
  uint64_t sector_grid_barriers_ = 0;        // scheduler_.grid_barriers() at the last flush
  std::unordered_set<uint64_t> sectors_[2];  // of the current phase: loaded, stored
  uint64_t footprint_[2] = {0, 0};           // bytes of the launch's closed phases
  uint64_t phase_grid_barriers_ = 0;         // scheduler_.grid_barriers() as the phase began
  // The kernel whose launch is running, and the buffer names it was given.
  const LoadedKernel* checked_ = nullptr;
  const std::vector<std::string>* checked_names_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> cache_;
};

}  // namespace

StatusOr<std::unique_ptr<Emulator>> Emulator::Create(const EmulatorOptions& options) {
  STITCH_ASSIGN_OR_RETURN(std::unique_ptr<emu::Jit> jit, emu::Jit::Create());
  return std::unique_ptr<Emulator>(new EmulatorImpl(options, std::move(jit)));
}

}  // namespace stitch
