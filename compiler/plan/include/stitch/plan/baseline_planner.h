// The baseline planner: groups a graph into kernels the way XLA does by default, so the
// stitching compiler has something honest to be measured against.
//   * Elementwise and data-movement producer->consumer chains fuse into one loop kernel.
//   * A reduction takes its elementwise producers (input fusion); producers shared by
//     several kernels are recomputed in each, as XLA duplicates cheap producers.
//   * A transpose of a minor-most dimension is not fused into a reduction: it takes a loop
//     kernel of its own (with its producers), whose result the reduction reads in order.
//   * A reduction's result is materialised: its consumers start a new kernel. A softmax
//     therefore takes three kernels.
//   * Outputs that are not reductions share one loop kernel per element count
//     (multi-output loop fusion). Outputs that are parameters, or reshapes of one, alias
//     their input buffer (aliasing.h).
//
// Thread-safety: pure function.
#pragma once

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/plan.h"

namespace stitch {

// Returns the baseline plan of a verified graph. Kernels are ordered so every kernel runs
// after the kernels whose outputs it reads.
StatusOr<FusionPlan> PlanBaseline(const Graph& g);

// Returns whether the hero reduce `node` is a row reduction (its minor-most input dimension
// is reduced, or it reduces nothing) rather than a column reduction.
bool IsRowReduction(const Graph& g, int node);

// Returns, for a plan, the nodes held in global memory that are neither parameters nor
// graph outputs (the bundle's temporary buffers), in first-written order.
std::vector<int> TemporaryNodes(const Graph& g, const FusionPlan& plan);

// Global-memory traffic a plan implies at full shapes, assuming each kernel reads each of
// its input buffers once and writes each output once.
struct TrafficEstimate {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t total() const { return bytes_read + bytes_written; }
};
TrafficEstimate EstimateTraffic(const Graph& g, const FusionPlan& plan);

// The lower bound on traffic for any plan: every parameter some output needs read once and
// every distinct output written once, but for outputs that alias a parameter (aliasing.h),
// which move nothing.
TrafficEstimate TrafficLowerBound(const Graph& g);

// Returns the bytes beyond TrafficLowerBound that every plan of `g` reads, on a device that
// holds `on_chip_bytes` on chip (OnChipBytes), because a statistic over a whole tensor must be
// complete before the values computed from it can be: a parameter read by such a statistic
// (a reduce of its input's outermost dimension longer than one, as batch norm's per-channel
// sums over the batch) and, through no reduce, by a node as large that reads the statistic's
// result, is read in full before that node's first element, and again for it, but for what
// stays on chip. The parameters' bytes past `on_chip_bytes` in all; 0 for every other graph.
// Layouts are taken as the reduce sees them: a transpose before the reduce is not followed.
int64_t ForcedRereadBytes(const Graph& g, int64_t on_chip_bytes);

}  // namespace stitch
