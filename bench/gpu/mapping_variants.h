// Loop and row-stitched kernels under each mapping the scheduler chose among
// (LoopMappingCandidates, RowStitchMappingCandidates: schedule.h), and global kernels with
// column phases under more bytes in flight per lane (GlobalStitchMappingCandidates), and
// column reductions split over blocks at each block size (SplitColumnReduceCandidates): the
// variants `gpu_bench --mappings` times, so that the choice, and the cost model's terms
// behind it (the stretch of a grid's partial last wave, the threads a row gets, Little's
// law), are checked against measured kernels. Its tests run the same variants on the
// emulator.
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
  int candidate = -1;  // its index among the kernel's candidates; -1 for the plan's own mapping
  // The plan with that kernel under the mapping, emitted and lowered to PTX, and assembled
  // where the plan's kernel was; its other kernels are the plan's.
  CompileResult compiled;
  bool shipped() const { return candidate < 0; }
};

// Returns, for each loop, row-stitched and global kernel of `compiled` that has candidates,
// in plan order, the plan as it is, then the plan with that kernel under each candidate
// mapping that differs from the plan's mapping and from every earlier candidate's (launch,
// vector width, threads per row, values per thread, phases' loads per step). `compiled` must be an
// exact compile (FAILED_PRECONDITION for a shape-generic one) made with `codegen`; returns the code
// generator's errors.
StatusOr<std::vector<MappingVariant>> MappingVariants(const CompileResult& compiled,
                                                      const CodegenOptions& codegen);

// "256x1 x 4224, vector 8": a mapping's block, grid and vector width, then what sets it apart
// where it has it: threads per row and values each keeps in registers (row kernels), the
// kept columns' period, a transpose tile, the bytes a column phase's lane keeps in flight.
std::string MappingText(const KernelSpec& k);

}  // namespace stitch::gpu
