// The baseline models: what the compilers a job already runs would emit for a graph, so a
// stitched plan is priced against the kernels the job would otherwise run. Each model is a
// graph rewrite (the compiler's own reduction rewrites) followed by the stitching planner's
// search restricted to the kernels that compiler emits, with that compiler's thread
// mappings. BASELINE_SOURCES.md gives every rule with the compiler source it comes from.
//
// XLA:GPU (section 2):
//   * reductions rewritten by its reduction splitter and tree rewriter (reduction_rewrites.h);
//   * loop fusion, input fusion of producers into a reduction, sibling and producer-consumer
//     multi-output fusion, reduction epilogues; no kernel with grid-wide barriers and no
//     reduction split inside one launch (XLA emits only race-free reductions);
//   * on Ampere and later, the Triton normalization rewriter: a reduction over exactly the
//     last dimension of at most 16,384 elements (softmax, layer norm), with its producers and
//     row-space consumers, in one kernel, when that is cheaper than the native fusions (the
//     rewriter's profitability check);
//   * XLA's launch rules for loop, row-reduction and column-reduction kernels (thread
//     counts, rows per block, vector widths, one block per row group or column tile).
//
// TorchInductor (section 3):
//   * split reductions (reduction_rewrites.h);
//   * reductions with the same (numel, rnumel) fused with their producers and consumers into
//     one kernel, however long the row (persistent or looped); no grid-wide barriers;
//   * launch configurations from Inductor's autotuning, modelled as the best mapping the
//     scheduler finds.
//
// Not modelled: Inductor's mix-order reduction (layer-norm backward's row and column
// reductions in one kernel) and XLA's small-column and elemental reduction emitters; both
// models then price those graphs as more kernels than the compiler would run.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"

namespace stitch {

enum class BaselineCompiler { kXla, kInductor };

// Returns "xla" or "inductor".
std::string_view BaselineCompilerName(BaselineCompiler compiler);

// A baseline plan and the graph it is a plan of: the input graph after the compiler's own
// rewrites, with the same parameters and outputs.
struct BaselinePlan {
  BaselineCompiler compiler = BaselineCompiler::kXla;
  Graph graph;
  FusionPlan plan;  // scheduled; node ids are `graph`'s
};

struct XlaModelOptions {
  // XLA runs its Triton normalization rewriter on Ampere (sm_80) and later.
  bool triton_normalization_fusion = true;
};

// Returns the XLA:GPU model's plan of a verified graph on `device`.
StatusOr<BaselinePlan> PlanXlaModel(const Graph& g, const GpuDevice& device,
                                    const XlaModelOptions& options = {});

// Returns the TorchInductor model's plan of a verified graph on `device`.
StatusOr<BaselinePlan> PlanInductorModel(const Graph& g, const GpuDevice& device);

// Returns the plan of `compiler`'s model.
StatusOr<BaselinePlan> PlanBaselineModel(BaselineCompiler compiler, const Graph& g,
                                         const GpuDevice& device, const XlaModelOptions& xla = {});

}  // namespace stitch
