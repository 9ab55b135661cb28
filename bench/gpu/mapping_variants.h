// Loop and row-stitched kernels under each mapping the scheduler chose among
// (LoopMappingCandidates, RowStitchMappingCandidates: schedule.h), a loop's transpose tile at
// other block sizes (TransposeTileMappingCandidates), and global kernels with
// column phases under more bytes in flight per lane (GlobalStitchMappingCandidates), and
// column reductions split over blocks at each block size (SplitColumnReduceCandidates): the
// variants `gpu_bench --mappings` times, so that the choice, and the cost model's terms
// behind it (the stretch of a grid's partial last wave, the threads a row gets, Little's
// law), are checked against measured kernels; and the plans with a global kernel's last loop
// phase apart, or a loop joined to the global kernel before it (PhaseRegroupings:
// stitch_planner.h), so that the planner's choice between a launch and a grid barrier is too.
// Its tests run the same variants on the emulator.
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
  int kernel = 0;      // the index of the re-mapped kernel in the plan (the first regrouped)
  int candidate = -1;  // its index among the kernel's candidates; -1 for the plan's own mapping
  // The plan with that kernel under the mapping, emitted and lowered to PTX, and assembled
  // where the plan's kernel was; its other kernels are the plan's.
  CompileResult compiled;
  // A regrouping's: the plan's kernels [kernel, kernel + span) run as `compiled`'s kernels
  // [kernel, kernel + kernels). 1 and 1 for a mapping.
  int span = 1;
  int kernels = 1;
  bool shipped() const { return candidate < 0; }
  bool regrouped() const { return span != 1 || kernels != 1; }
};

// Returns, for each loop, row-stitched and global kernel of `compiled` that has candidates,
// in plan order, the plan as it is, then the plan with that kernel under each candidate
// mapping that differs from the plan's mapping and from every earlier candidate's (launch,
// vector width, threads per row, values per thread, phases' loads per step). `compiled` must be an
// exact compile (FAILED_PRECONDITION for a shape-generic one) made with `codegen`; returns the code
// generator's errors.
StatusOr<std::vector<MappingVariant>> MappingVariants(const CompileResult& compiled,
                                                      const CodegenOptions& codegen);

// Returns, for each regrouping PhaseRegroupings gives for `compiled`'s plan, the plan so
// regrouped, its new kernels emitted, lowered and assembled as MappingVariants' are, and its
// temporaries those of the new plan; before the first regrouping of each first kernel and
// span, the plan as it is (candidate -1, kernels as many as the span), which MappingVariants
// may list already for a span of 1. Candidates count from 0 per first kernel and span.
// Errors as MappingVariants'.
StatusOr<std::vector<MappingVariant>> RegroupingVariants(const CompileResult& compiled,
                                                         const CodegenOptions& codegen);

// Everything gpu_bench --mappings runs for `compiled`: MappingVariants', then
// RegroupingVariants' but for a plan as it is already listed for the same kernel and span.
StatusOr<std::vector<MappingVariant>> SweptVariants(const CompileResult& compiled,
                                                    const CodegenOptions& codegen);

// What `v` runs in place of the plan's kernels: MappingText for a mapping; for a regrouping,
// its kernels' mappings, each after its name ("stitch_k0_global_stitch: 1024x1 x 264, ...;
// stitch_k0_global_stitch_loop: 256x1 x 4224, vector 8"), after "apart: " where it has more
// kernels than it replaces, "joined: " where fewer, and "as shipped: " where it is the plan.
std::string VariantText(const MappingVariant& v);

// "256x1 x 4224, vector 8": a mapping's block, grid and vector width, then what sets it apart
// where it has it: threads per row and values each keeps in registers (row kernels), the
// kept columns' period, a transpose tile, the bytes a column phase's lane keeps in flight.
std::string MappingText(const KernelSpec& k);

}  // namespace stitch::gpu
