#include "stitch/compiler/cost_model.h"

#include "stitch/compiler/baseline_planner.h"

namespace stitch {

const std::vector<GpuDevice>& KnownDevices() {
  // Public datasheet bandwidths; launch overhead as measured back-to-back on a stream.
  static const std::vector<GpuDevice> devices = {
      {"H100", "sm_90", 132, 3.35e12, 2.5e-6},
      {"H200", "sm_90", 132, 4.8e12, 2.5e-6},
      {"A100", "sm_80", 108, 2.0e12, 2.5e-6},
  };
  return devices;
}

const GpuDevice* FindDevice(std::string_view name_or_target) {
  for (const GpuDevice& d : KnownDevices()) {
    if (d.name == name_or_target || d.target == name_or_target) return &d;
  }
  return nullptr;
}

namespace {

class AnalyticalCostModel : public CostModel {
 public:
  explicit AnalyticalCostModel(GpuDevice device) : device_(std::move(device)) {}

  PlanCost Estimate(const Graph& g, const FusionPlan& plan) const override {
    PlanCost cost;
    cost.global_bytes = EstimateTraffic(g, plan).total();
    cost.kernels = static_cast<int>(plan.kernels.size());
    cost.seconds = static_cast<double>(cost.global_bytes) / device_.hbm_bytes_per_second +
                   cost.kernels * device_.launch_seconds;
    return cost;
  }

 private:
  GpuDevice device_;
};

}  // namespace

std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device) {
  return std::make_unique<AnalyticalCostModel>(device);
}

}  // namespace stitch
