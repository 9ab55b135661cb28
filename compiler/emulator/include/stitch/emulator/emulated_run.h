// Runs a compiled graph's kernels on the host emulator, in plan order, with buffers for
// parameters, temporaries and outputs.
//
// Thread-safety: uses the given Emulator, so one call per Emulator at a time.
#pragma once

#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulator.h"
#include "stitch/ir/graph.h"
#include "stitch/reference/tensor.h"

namespace stitch {

struct EmulatedRun {
  std::vector<Tensor> outputs;          // one per graph output
  std::vector<LaunchStats> per_kernel;  // one per kernel, in launch order
  uint64_t global_bytes() const;        // loaded + stored over all kernels
};

// Launches `kernels` (from CompileGraph on `g`) on `emulator` with `params` ordered by
// parameter number. Output and temporary buffers start filled with 0xff bytes (NaN for
// floats), so an element a kernel forgets to write shows up as a mismatch. Every buffer is
// 256-byte aligned, as the GPU's are. Each kernel with workspace_bytes > 0 gets a workspace
// of its own, zero-filled, as its last argument (codegen.h).
StatusOr<EmulatedRun> RunOnEmulator(const Graph& g, const std::vector<CompiledKernel>& kernels,
                                    const std::vector<Tensor>& params, Emulator& emulator);

}  // namespace stitch
