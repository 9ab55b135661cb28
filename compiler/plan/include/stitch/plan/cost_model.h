// The cost model: what a fusion plan should take on a named GPU.
//
// The analytical model prices each kernel from its thread mapping (plan.h):
//   * global-memory bytes (each buffer once per launch or phase) over the bandwidth the
//     mapping can reach: HBM bandwidth, or less when too few bytes are in flight to cover
//     DRAM latency (Little's law over resident threads and the loads each keeps in flight);
//   * the tail of partial waves when the grid does not fill the SMs evenly;
//   * one launch overhead per kernel;
//   * block barriers per row or tile, and grid-wide barriers per launch.
// It sits behind CostModel so that a learned model (trained on runtimes measured on real
// GPUs) plugs in without changing callers.
//
// Thread-safety: CostModel implementations are immutable after construction and may be
// shared across threads.
#pragma once

#include <memory>
#include <vector>

#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"

namespace stitch {

// The modelled cost of one kernel of a plan, by term.
struct KernelCost {
  double seconds = 0;         // the total of the terms below
  double memory_seconds = 0;  // bytes over achieved bandwidth, stretched by wave tails
  double launch_seconds = 0;
  double barrier_seconds = 0;  // block and grid barriers
  int64_t global_bytes = 0;
  int resident_blocks_per_sm = 0;
  double waves = 0;               // blocks over (SMs x resident blocks per SM)
  double bandwidth_fraction = 0;  // achieved over peak HBM bandwidth, in (0, 1]
};

struct PlanCost {
  double seconds = 0;
  int64_t global_bytes = 0;
  int kernels = 0;
  std::vector<KernelCost> per_kernel;  // in plan order
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Returns the modelled cost of running `plan` (scheduled: every kernel has its mapping)
  // for a verified graph `g` once.
  virtual PlanCost Estimate(const Graph& g, const FusionPlan& plan) const = 0;
  // Returns the modelled cost of one scheduled kernel.
  virtual KernelCost EstimateKernel(const Graph& g, const KernelSpec& kernel) const = 0;
};

// Returns the analytical model for `device`.
std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device);

}  // namespace stitch
