// The host GPU emulator. It takes a kernel's portable LLVM module (codegen.h), rewrites it
// for the host (thread ids, barriers and shuffles become calls into the emulator runtime;
// shared memory becomes a per-block buffer; libdevice calls become host libm), JIT-compiles
// it with ORC, and runs every thread of a block as a fiber that switches at barriers and
// shuffles. Blocks run one after another.
//
// Thread-safety: an Emulator may be used from one thread at a time. Separate Emulator
// objects are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stitch/compiler/codegen.h"
#include "stitch/compiler/status.h"

namespace stitch {

struct EmulatorOptions {
  // Run the threads of a block in a random order between synchronisation points (a new
  // permutation at every barrier), so a missing barrier shows up as a wrong answer.
  bool random_order = false;
  uint64_t seed = 0;
};

// What one launch did.
struct LaunchStats {
  uint64_t global_bytes_loaded = 0;  // loads through kernel pointer parameters
  uint64_t global_bytes_stored = 0;
  uint64_t barriers = 0;  // block-wide barriers completed, over all blocks
  uint64_t threads = 0;
};

class Emulator {
 public:
  // Returns an emulator, or INTERNAL if the host JIT cannot be set up.
  static StatusOr<std::unique_ptr<Emulator>> Create(const EmulatorOptions& options = {});
  virtual ~Emulator() = default;

  // Runs `kernel` (its portable_ir) with `args[i]` as the address of the buffer behind
  // parameter i (for a non-pointer parameter, the address of its value). Compiles the
  // kernel on first use and caches it by name and IR. Returns INVALID_ARGUMENT when args do
  // not match the kernel's parameters, the IR is not bitcode or the launch dimensions are
  // empty or exceed 1024 threads per block; UNIMPLEMENTED when the kernel uses an NVVM
  // intrinsic or libdevice function the emulator lacks (named in the message);
  // RESOURCE_EXHAUSTED when its per-thread local memory exceeds the fiber stack; INTERNAL
  // when the kernel deadlocks ("deadlock in block (x,y,z): ...": threads of a block wait at
  // different barriers, or lanes of a warp at different warp operations) or cannot be
  // compiled. After an error the emulator remains usable; the buffers may hold partial
  // results.
  virtual StatusOr<LaunchStats> Launch(const CompiledKernel& kernel,
                                       const std::vector<void*>& args) = 0;
};

}  // namespace stitch
