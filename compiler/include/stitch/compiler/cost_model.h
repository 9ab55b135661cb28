// The cost model: what a fusion plan should take on a named GPU.
//
// Today's model is analytical and simple: global-memory bytes over HBM bandwidth plus one
// launch overhead per kernel. It sits behind CostModel so that richer models (occupancy and
// barrier terms, or a learned model trained on measured runtimes) plug in without changing
// callers.
//
// Thread-safety: devices are constants; CostModel implementations are immutable after
// construction and may be shared across threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/compiler/graph.h"
#include "stitch/compiler/plan.h"

namespace stitch {

// The figures of one GPU the model needs.
struct GpuDevice {
  std::string name;    // "H100"
  std::string target;  // "sm_90"
  int sms = 0;
  double hbm_bytes_per_second = 0;
  double launch_seconds = 0;  // per kernel, launch plus the tail of the previous one
};

// Returns the device table (A100, H100, H200).
const std::vector<GpuDevice>& KnownDevices();

// Returns the device named `name_or_target` ("H100", "sm_90"; for a target shared by
// several devices, the first listed), or nullptr when unknown.
const GpuDevice* FindDevice(std::string_view name_or_target);

struct PlanCost {
  double seconds = 0;
  int64_t global_bytes = 0;
  int kernels = 0;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Returns the modelled cost of running `plan` for a verified graph `g` once.
  virtual PlanCost Estimate(const Graph& g, const FusionPlan& plan) const = 0;
};

// Returns the analytical model for `device`.
std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device);

}  // namespace stitch
