// The eager model: what a job runs with no compiler at all (PyTorch eager mode), so its
// savings can be priced against the kernels it would otherwise launch. BASELINE_SOURCES.md
// section 6 gives each rule with the ATen source it comes from.
//
//   * Every op is its own kernel, reading its operands from global memory and writing its
//     result there: ATen launches one TensorIterator kernel per elementwise op, one
//     reduction kernel per reduce, one kernel per cat, pad, flip or arange.
//   * Views launch nothing: broadcast (expand), reshape of a contiguous tensor, transpose
//     (permute) and slice only change strides, so the kernel of the op that consumes a view
//     reads the viewed buffer through them.
//   * Scalar constants are kernel arguments; tensor constants are buffers already on the GPU.
//   * Launch configurations are the scheduler's for a kernel of that kind (ATen's loops
//     vectorize 4-wide where the layout allows, its reductions split over blocks when the
//     output is small, as the scheduler's mappings do).
//
// Not modelled: ops ATen runs as two kernels (constant_pad_nd fills, then copies); the
// model then prices eager as slightly faster than it is, which understates savings.
//
// Thread-safety: pure function.
#pragma once

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"

namespace stitch {

// Returns the eager model's scheduled plan of a verified graph on `device`, or the
// scheduler's error when a kernel has no mapping on it. The plan is for pricing: outputs
// that are views of other buffers have no kernel, as in eager mode.
StatusOr<FusionPlan> PlanEagerModel(const Graph& g, const GpuDevice& device);

}  // namespace stitch
