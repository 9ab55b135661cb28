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
  // Also measure how the launch's global loads and stores meet the GPU's memory system
  // (LaunchStats::sector_loads and sector_stores), as a GPU's DRAM and L2 would see them:
  //
  // - Sector efficiency. A warp instruction fetches every 32-byte sector its active lanes
  //   touch, once. The emulator gives each load and store of the kernel a site, the GPU
  //   instruction it becomes (a thread's accesses in one basic block at constant distances
  //   inside an aligned window of up to 16 bytes share one, as NVPTX's load-store vectorizer
  //   makes one vector access of them), and takes the k-th execution of one site by the
  //   threads of one warp as one warp instruction: fetched bytes are 32 times the distinct
  //   sectors of each such access,
  //   summed over them; used bytes are what the lanes asked for. A coalesced access fetches
  //   what it uses; a lane-strided one fetches a sector per lane (16 times the bytes for
  //   bf16, 8 times for f32). Where lanes run a loop a different number of times, their
  //   k-th executions are taken as one instruction though the GPU's would not align, so
  //   a divergent kernel's figure is approximate.
  // - Re-reads. The warp accesses' sectors, in the order below, go through a model of L2: a
  //   fully associative, write-back LRU cache of reuse_window_bytes. A sector is resident
  //   from a touch until more than reuse_window_bytes of other distinct sectors have been
  //   touched since. A load of a sector not resident reads it from DRAM; a store to a
  //   sector not resident and dirty (stored since it last came in) will write it back once.
  //   Those are the DRAM bytes of loads and of stores; the re-reads (re-writes) among them
  //   are the ones of a sector the same kind of access had moved before. Distinct bytes
  //   are the sectors loaded (stored) at all: a kernel that moves each sector once has
  //   DRAM bytes equal to them, and a load of what the kernel itself stored just before
  //   hits.
  //
  // Order: blocks run one after another in linear order (x fastest), the order in which the
  // GPU dispatches them; within a block (between barriers, where the emulator runs each
  // thread as far as it goes) the warp accesses are ordered by execution count, then warp,
  // so the warps of a block advance together as on the GPU. The GPU runs many blocks at
  // once, so a re-use distance the emulator sees inside one block is on the GPU that
  // distance times the blocks in flight; between blocks the emulator's distances are the
  // GPU's. A re-read inside a block (a loop-mode row read twice) is therefore seen only at
  // a window the block's own traffic exceeds; one between blocks (a transposed operand
  // whose sector serves rows far apart) is seen as on the GPU. In a kernel with grid
  // barriers every block runs at once, the warp accesses of each phase are ordered as
  // above over the whole grid, and the cache carries across phases. Atomics and memory
  // intrinsics are not counted. The cache's state starts empty at every launch. Off by
  // default: every access then calls into the emulator, as with count_footprint.
  bool count_sectors = false;
  // The L2 share a sector survives in between two touches, for count_sectors. The cost
  // model's fitted value for a device is CostModelParametersFor(device,
  // kCurrentCostModel).reuse_window_bytes (half the H100's 50 MiB L2). 0 makes every touch
  // after another sector's a re-read.
  uint64_t reuse_window_bytes = 0;
  // The error of the GPU's approximate math, which codegen emits for f32 compute where the
  // tolerance rule allows it (elemental_emitter.cc): libdevice's __nv_rsqrtf
  // (rsqrt.approx.f32), __nv_fast_fdividef (div.approx.f32) and __nv_fast_expf (ex2.approx.f32
  // of the f32 product x * log2(e), whose rounding the emulator reproduces). 0 computes them
  // correctly rounded, as the host does; a relative error e > 0 makes every result e larger in
  // magnitude, so a kernel runs with its approximations at the bound rather than at the
  // host's exact values, and a comparison with the interpreter checks that the tolerance
  // covers them (kApproximateMathErrorBound is the PTX ISA's bound).
  double approximate_math_error = 0;
};

// The PTX ISA's bound on the approximate math codegen emits, as a relative error: 2 ulp of
// an f32 result for div.approx.f32 (2^-22, the larger of the two), and 2^-22.9 for
// rsqrt.approx.f32.
inline constexpr double kApproximateMathErrorBound = 0x1p-22;

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

// Global traffic by sectors (EmulatorOptions::count_sectors), of loads or of stores.
struct SectorTraffic {
  uint64_t warp_accesses = 0;   // warp instructions (a site's k-th execution by a warp)
  uint64_t used_bytes = 0;      // bytes the lanes asked for
  uint64_t fetched_bytes = 0;   // 32 x the distinct sectors of each warp access, summed
  uint64_t dram_bytes = 0;      // sectors moved to or from DRAM (see above), in bytes
  uint64_t distinct_bytes = 0;  // the distinct sectors this kind of access touched, in bytes
  uint64_t reread_bytes = 0;    // of dram_bytes: sectors moved again (re-reads, re-writes)
  SectorTraffic& operator+=(const SectorTraffic& o) {
    warp_accesses += o.warp_accesses;
    used_bytes += o.used_bytes;
    fetched_bytes += o.fetched_bytes;
    dram_bytes += o.dram_bytes;
    distinct_bytes += o.distinct_bytes;
    reread_bytes += o.reread_bytes;
    return *this;
  }
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
  // With EmulatorOptions::count_sectors: sector efficiency and re-reads (see above).
  SectorTraffic sector_loads;
  SectorTraffic sector_stores;
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
  // when the grid barrier's workspace is misused (its count of arrived blocks not 0, threads
  // passing different workspaces) or when the kernel cannot be compiled. After an error the
  // emulator remains usable; the buffers may hold partial results. With options.arg_bytes, an
  // access outside its buffer is INTERNAL "error in block (x,y,z): thread (x,y,z): out of bounds:
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
