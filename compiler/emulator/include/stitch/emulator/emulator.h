// The host GPU emulator. It takes a kernel's portable LLVM module (codegen.h), rewrites it
// for the host (thread ids, barriers and shuffles become calls into the emulator runtime;
// shared memory becomes a per-block buffer; libdevice calls become host libm), JIT-compiles
// it with ORC, and runs every thread of a block as a fiber that switches at barriers and
// shuffles. Blocks run one after another, except in a kernel that calls the grid barrier
// (stitch.grid.sync, codegen.h): there every block of the grid runs at once, each with its
// own shared memory, and a thread at the grid barrier waits until every thread of the grid
// has arrived.
//
// Thread-safety: an Emulator may be used from one thread at a time. Separate Emulator
// objects are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/codegen/codegen.h"

namespace stitch {

// The grid cap (CompileOptions::max_persistent_grid_blocks) for plans the emulator runs: it
// runs every thread of a kernel with grid barriers at once, at most 65,536 of them, and
// blocks have at most 1024 threads.
inline constexpr int64_t kEmulatorMaxPersistentGridBlocks = 64;

struct EmulatorOptions {
  // Run the threads of a block in a random order between synchronisation points (a new
  // permutation at every barrier), so a missing barrier shows up as a wrong answer. In a
  // kernel with a grid barrier the permutation is over the threads of the whole grid.
  bool random_order = false;
  uint64_t seed = 0;
  // Also count the distinct 32-byte sectors each launch touches through its pointer
  // parameters (DRAM's access unit): the traffic a GPU's caches cannot avoid. Loads and
  // stores are counted apart. In a kernel with grid barriers the distinct sets restart at
  // every grid barrier: its footprint is the sum over the phases between grid barriers of
  // each phase's distinct sectors, since at full shapes a value read again after a grid
  // barrier comes from DRAM again. A kernel without grid barriers is one phase. The
  // workspace (the last argument of a kernel with CompiledKernel::workspace_bytes > 0)
  // counts like any buffer: the partial results a split reduction stores there are
  // traffic; the grid barrier's own protocol on it is not. Every global access then calls
  // into the emulator, which makes runs several times slower.
  bool count_footprint = false;
};

// How one launch runs (Emulator::Launch).
struct LaunchOptions {
  // The bytes of the buffer behind each argument, in argument order (a workspace last).
  // When given, every global load and store the kernel makes through a pointer argument is
  // checked against the buffer that pointer derives from: an access that leaves it fails the
  // launch, naming the block, the thread, the buffer and the offset, before it touches
  // memory. Empty: accesses are not checked.
  std::vector<uint64_t> arg_bytes;
  // How errors name each argument's buffer ("node 35 'out' f16[64,56,56,256]"); empty: by
  // the kernel's own parameter names.
  std::vector<std::string> arg_names;
  // Linear indices (x + y * grid.x + z * grid.x * grid.y) of the blocks to run, each below
  // the grid's block count and each once; empty runs every block. Every thread still sees
  // the launch's full geometry. In a kernel with a grid barrier the listed blocks run at
  // once and the barrier waits for them alone, so values they read from the blocks left out
  // are whatever the buffers held: a sample checks where a kernel accesses memory, not what
  // it computes.
  std::vector<uint64_t> blocks;
};

// What one launch did.
struct LaunchStats {
  // Bytes the kernel's own loads and stores move through its pointer parameters, the
  // workspace included (the grid barrier's protocol on it is not counted).
  uint64_t global_bytes_loaded = 0;
  uint64_t global_bytes_stored = 0;
  // With EmulatorOptions::count_footprint: distinct sectors loaded and stored, in bytes,
  // summed over the phases between grid barriers (see above).
  uint64_t footprint_bytes_loaded = 0;
  uint64_t footprint_bytes_stored = 0;
  uint64_t barriers = 0;       // block-wide barriers completed, over all blocks
  uint64_t grid_barriers = 0;  // grid-wide barriers completed (each counted once)
  uint64_t threads = 0;        // of the launch's full geometry
  uint64_t blocks_run = 0;     // blocks that ran (LaunchOptions::blocks, or all)
};

class Emulator {
 public:
  // Returns an emulator, or INTERNAL if the host JIT cannot be set up.
  static StatusOr<std::unique_ptr<Emulator>> Create(const EmulatorOptions& options = {});
  virtual ~Emulator() = default;

  // Runs `kernel` (its portable_ir) with `args[i]` as the address of the buffer behind
  // parameter i (for a non-pointer parameter, the address of its value). A kernel with
  // workspace_bytes > 0 takes its workspace as the last argument, after those of
  // param_nodes (codegen.h): the caller allocates it 256-byte aligned and zero-fills it
  // before the first launch. Compiles the kernel on first use and caches it by name and
  // IR. Returns INVALID_ARGUMENT when args do not match the kernel's parameters, the
  // workspace is missing or not 256-byte aligned, the IR is not bitcode or the launch
  // dimensions are empty or exceed 1024 threads per block; UNIMPLEMENTED when the kernel
  // uses an NVVM intrinsic or libdevice function the emulator lacks (named in the message);
  // RESOURCE_EXHAUSTED when its per-thread local memory exceeds the fiber stack, or when a
  // kernel with a grid barrier launches more than 65536 threads; INTERNAL when the kernel
  // deadlocks ("deadlock in block (x,y,z): ...": threads of a block wait at different
  // barriers, or lanes of a warp at different warp operations; "deadlock at a grid barrier:
  // ...": some threads returned, or wait elsewhere, while others wait at a grid barrier),
  // when the grid barrier's workspace is misused (its arrival counter not 0, threads passing
  // different workspaces) or when the kernel cannot be compiled. After an error the emulator
  // remains usable; the buffers may hold partial results. With options.arg_bytes, an access
  // outside its buffer is INTERNAL "error in block (x,y,z): thread (x,y,z): out of bounds:
  // ..."; options that do not fit the kernel (sizes or names not one per argument, a block
  // index outside the grid or listed twice) are INVALID_ARGUMENT.
  virtual StatusOr<LaunchStats> Launch(const CompiledKernel& kernel, const std::vector<void*>& args,
                                       const LaunchOptions& options) = 0;
  // Runs every block, unchecked.
  StatusOr<LaunchStats> Launch(const CompiledKernel& kernel, const std::vector<void*>& args) {
    return Launch(kernel, args, LaunchOptions{});
  }
};

}  // namespace stitch
