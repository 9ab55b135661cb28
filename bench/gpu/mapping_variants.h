// Loop kernels under each mapping the scheduler chose among (LoopMappingCandidates,
// schedule.h): the variants `gpu_bench --mappings` times, so that the choice, and the cost
// model's terms behind it (the stretch of a grid's partial last wave above all), are checked
// against measured kernels. Its tests run the same variants on the emulator.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/codegen/codegen.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/plan.h"

namespace stitch::gpu {

struct MappingVariant {
  int kernel = 0;      // the index of the re-mapped kernel in the plan
  int candidate = -1;  // its index in LoopMappingCandidates; -1 for the plan's own mapping
  // The plan with that kernel under the mapping, emitted and lowered to PTX, and assembled
  // where the plan's kernel was; its other kernels are the plan's.
  CompileResult compiled;
  bool shipped() const { return candidate < 0; }
};

// Returns, for each loop kernel of `compiled` in plan order, the plan as it is, then the
// plan with that kernel under each candidate mapping whose launch and vector width differ
// from the plan's mapping and from every earlier candidate's. `compiled` must be an exact
// compile (FAILED_PRECONDITION for a shape-generic one) made with `codegen`; returns the
// code generator's errors.
StatusOr<std::vector<MappingVariant>> LoopMappingVariants(const CompileResult& compiled,
                                                          const CodegenOptions& codegen);

// "256x1 x 4224, vector 8": a loop mapping's block, grid and vector width, with the kept
// columns' period and the transpose tile where the mapping has them.
std::string MappingText(const ThreadMapping& m);

}  // namespace stitch::gpu
