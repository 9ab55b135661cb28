// The stitching planner: starts from the XLA-style plan and merges kernels while the cost
// model says the merged plan is cheaper.
//
// A merge joins two kernels that are connected by data (one reads the other's output) or
// that read the same buffer. The merged kernel is a loop kernel when it has no reduce, and
// a row-stitched kernel (row_stitch.h) when all its reduces share one row geometry; the
// reduces' results then stay on chip (registers or shared memory) instead of making a round
// trip through global memory, and the kernel's inputs are read once. A merge that would
// create a cycle between kernels, or whose kernel cannot be scheduled on the device, is
// never taken.
//
// The search is a beam search over merge steps: each step expands every plan in the beam
// by every legal merge, and keeps the `beam_width` cheapest. Merge costs are memoised by
// the merged kernels' outputs, so plans that share kernels share work; the search stops
// when no plan improves or the evaluation budget is spent, and returns the cheapest plan
// seen.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"

namespace stitch {

// The kernels a plan may contain. The stitching planner uses every kind; the baseline models
// (baseline_models.h) run the same search restricted to the kernels XLA and Inductor emit.
struct FusionRules {
  // Reduces and the row-space values computed from them in one kernel (kRowStitch).
  bool row_stitch = true;
  // The longest row (reduced elements) a row-stitched kernel may hold; 0 for any.
  int64_t max_row_stitch_len = 0;
  // Only reduces over exactly one dimension, the last, join a row-stitched kernel.
  bool row_stitch_last_dim_only = false;
  // Blocks that exchange values through global memory: global_stitch kernels behind grid
  // barriers, and reductions split over the blocks of one launch (behind a grid barrier, or
  // combined by the last block of each column tile to arrive).
  bool global_stitch = true;
  // Reductions one kernel may compute, and column reductions (0: any). A compiler with a
  // fixed budget per fusion has such caps: XLA's FusionFitsInBudget allows 8 unnested
  // reductions and 48 KiB of shared memory, which its column-reduction tile (32 x 65 floats
  // per output) fills at 5 outputs.
  int max_reduces_per_kernel = 0;
  int max_column_reduces_per_kernel = 0;
  // A transpose of a minor-most dimension in a reduction's kernel. A reduction's threads walk
  // its rows in order, so they read the transposed operand a sector per element, and unless
  // the operand's minor-most dimension becomes the row dimension (then the rows a block
  // reduces side by side share sectors) nothing else uses the rest of the sector soon. Kept
  // out, the transpose is a loop kernel of its own, tiled through shared memory, and the
  // reduction reads its result in order (XLA keeps every such transpose apart). The planning
  // model counts the strided re-reads as L2 hits and would merge them: suite row #13 ran at
  // 0.36x torch.compile on the H100 so.
  bool transposes_in_reductions = false;
  // Row-stitched kernels that read such a transpose stage it a tile of rows at a time
  // (TileTransposedRows), which reads the operand in whole sectors; a kernel so tiled may
  // hold the transpose. The baseline models keep their compilers' fusions instead: XLA's
  // keeps the transpose apart, Inductor's reads it in row order.
  bool transposed_row_tiles = true;
  // Loop-mode rows (too long for registers) capped to the rows whose re-reads fit in L2
  // (FitLoopRowsInL2). Inductor and XLA launch a program or block per row whatever its
  // length, so their models keep every row in flight and read it once per pass.
  bool loop_rows_in_l2 = true;
  // Loop-mode rows whose values fit a block's shared memory kept there
  // (KeepLoopRowsInSharedMemory), so that they are read from DRAM once. Inductor's and XLA's
  // row kernels keep rows in registers or read them once per pass.
  bool loop_rows_in_shared_memory = true;
  // Loop kernels that read per-column values keep each thread on its columns, so those
  // values are computed once per thread (KeepLoopColumnsPerThread). Triton's and XLA's loop
  // kernels compute them for every element.
  bool loop_columns_per_thread = true;
  // Loop kernels of their own re-choose their grid and vector width once the plan is made,
  // priced with the SMs' measured block starts (RemapLoopForBlockStarts). The baseline models
  // keep the planning model's mapping.
  bool loop_block_starts = true;
  // Outputs of a reduce's shape computed from it (an epilogue: a bias gradient's cast, batch
  // norm's mean and rstd from its sums) in the reduce kernel, the reduce then written only
  // where something else reads it. XLA's reduction epilogue fusion and Inductor's fusion of
  // a pointwise consumer into its reduction keep them there, so the baseline models do, and
  // so does the stitching planner: without them a global kernel held suite row #11's bias
  // gradient's cast as a phase of its own, behind a second grid barrier, and combined the
  // split column sums behind the first (264 blocks of 1,024 threads; 36.5 us in the H200's
  // mapping sweep). With them #11 is one column reduction whose split sums the last block of
  // each tile combines, no grid barrier at all (256 blocks of 512 threads; the model prices
  // it at 21.4 us on the H200, where no GPU has run it yet).
  bool reduce_epilogues = true;
};

struct StitchPlannerOptions {
  FusionRules rules;
  int beam_width = 3;
  // Work budget of the search, in merge evaluations: a base plus a share per node; the best
  // plan so far is returned when it runs out. A count rather than a time, so that a plan does
  // not depend on how busy the machine compiling it is. About 80 evaluations take a
  // millisecond on the 2-core development VM, so the defaults take about 40 ms plus 0.05 ms
  // per node there, where a search runs to its end; most graphs converge long before.
  int64_t budget_evaluations = 3200;
  int64_t budget_evaluations_per_node = 4;
};

// Returns the stitched, scheduled plan of a verified graph for `device`, made of the kernels
// `options.rules` allows.
StatusOr<FusionPlan> PlanStitched(const Graph& g, const GpuDevice& device,
                                  const StitchPlannerOptions& options = {});

// Kernels [first, first + span) of a plan, regrouped into `kernels`, which run in their place.
struct KernelRegrouping {
  int first = 0;
  int span = 1;
  std::vector<KernelSpec> kernels;
};

// Returns the other ways to group a stitched plan's kernels into launches that the planner
// chose between on a launch saved against a grid barrier added, for gpu_bench --mappings to
// time beside the plan (the model prices the two within a percent of each other where suite
// rows #17, #18 and #20 chose; the one measurement of such a choice, #20 on an H200, ran the
// joined kernel slower than a baseline's kernels apart):
// - each global kernel whose last phase is a loop, as a global kernel of its other phases
//   followed by the loop as a kernel of its own, under the mapping the planner would give
//   that loop and under each other of LoopMappingCandidates';
// - each global kernel followed by a loop kernel (no transpose tile), joined as one global
//   kernel with the loop as its last phase.
// Every kernel comes scheduled for `device` as the planner schedules its own; a regrouping
// whose kernels cannot be scheduled is left out. Split loops are named after their global
// kernel with "_loop".
std::vector<KernelRegrouping> PhaseRegroupings(const Graph& g, const FusionPlan& plan,
                                               const GpuDevice& device);

}  // namespace stitch
