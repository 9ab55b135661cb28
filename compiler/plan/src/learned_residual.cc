// The learned residual's features and the evaluation of its trees (learned_residual.h).
#include "stitch/plan/learned_residual.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "cost_residual_table.h"

namespace stitch {

namespace {

// The kernel whose analytical estimate is the largest: its mapping speaks for the plan.
size_t SlowestKernel(const PlanCost& cost) {
  size_t slowest = 0;
  for (size_t i = 1; i < cost.per_kernel.size(); ++i) {
    if (cost.per_kernel[i].seconds > cost.per_kernel[slowest].seconds) slowest = i;
  }
  return slowest;
}

class CorrectedCostModel : public CostModel {
 public:
  CorrectedCostModel(std::unique_ptr<CostModel> analytical, const LearnedResidual& residual)
      : analytical_(std::move(analytical)), residual_(residual) {}

  PlanCost Estimate(const Graph& g, const FusionPlan& plan) const override {
    PlanCost cost = analytical_->Estimate(g, plan);
    Correct(plan, cost);
    return cost;
  }

  KernelCost EstimateKernel(const Graph& g, const KernelSpec& kernel) const override {
    FusionPlan one;
    one.kernels.push_back(kernel);
    PlanCost cost;
    cost.per_kernel.push_back(analytical_->EstimateKernel(g, kernel));
    cost.seconds = cost.per_kernel[0].seconds;
    cost.global_bytes = cost.per_kernel[0].global_bytes;
    cost.kernels = 1;
    Correct(one, cost);
    return cost.per_kernel[0];
  }

 private:
  // Scales the plan's estimate and each kernel's terms by exp(predicted residual).
  void Correct(const FusionPlan& plan, PlanCost& cost) const {
    if (!std::isfinite(cost.seconds) || cost.seconds <= 0) return;
    const double factor = std::exp(residual_.Predict(ResidualFeaturesOf(plan, cost)));
    cost.seconds *= factor;
    for (KernelCost& k : cost.per_kernel) {
      k.seconds *= factor;
      k.memory_seconds *= factor;
      k.launch_seconds *= factor;
      k.barrier_seconds *= factor;
      k.issue_seconds *= factor;
      k.bandwidth_fraction /= factor;
    }
  }

  std::unique_ptr<CostModel> analytical_;
  const LearnedResidual& residual_;
};

}  // namespace

const std::array<std::string_view, kResidualFeatureCount>& ResidualFeatureNames() {
  static constexpr std::array<std::string_view, kResidualFeatureCount> kNames = {
      "kernels",          "modeled_us",         "memory_share", "issue_share",  "fixed_share",
      "dram_over_global", "bandwidth_fraction", "kind",         "vector_width", "registers",
      "instructions",     "resident_blocks",    "waves",
  };
  return kNames;
}

ResidualFeatures ResidualFeaturesOf(const FusionPlan& plan, const PlanCost& cost) {
  ResidualFeatures f{};
  if (plan.kernels.empty() || cost.per_kernel.size() != plan.kernels.size() ||
      !std::isfinite(cost.seconds) || cost.seconds <= 0) {
    return f;
  }
  double memory = 0, issue = 0, fixed = 0;
  int64_t dram = 0, global = 0;
  for (const KernelCost& k : cost.per_kernel) {
    memory += k.memory_seconds;
    issue += k.issue_seconds;
    fixed += k.launch_seconds + k.barrier_seconds;
    dram += k.dram_bytes;
    global += k.global_bytes;
  }
  const size_t s = SlowestKernel(cost);
  const KernelSpec& kernel = plan.kernels[s];
  const KernelCost& slowest = cost.per_kernel[s];
  const ThreadMapping& m = kernel.mapping;
  f[kResidualKernels] = static_cast<double>(plan.kernels.size());
  f[kResidualModeledUs] = cost.seconds * 1e6;
  f[kResidualMemoryShare] = memory / cost.seconds;
  f[kResidualIssueShare] = issue / cost.seconds;
  f[kResidualFixedShare] = fixed / cost.seconds;
  f[kResidualDramOverGlobal] =
      global > 0 ? static_cast<double>(dram) / static_cast<double>(global) : 1.0;
  f[kResidualBandwidthFraction] = slowest.bandwidth_fraction;
  f[kResidualKind] = static_cast<double>(static_cast<int>(kernel.kind));
  f[kResidualVectorWidth] = static_cast<double>(m.vector_width);
  f[kResidualRegisters] = static_cast<double>(m.assembled_registers > 0 ? m.assembled_registers
                                                                        : m.registers_per_thread);
  f[kResidualInstructions] = static_cast<double>(std::max(m.assembled_instructions, 0));
  f[kResidualResidentBlocks] = static_cast<double>(slowest.resident_blocks_per_sm);
  f[kResidualWaves] = slowest.waves;
  return f;
}

const LearnedResidual& LearnedResidual::Trained() {
  static const LearnedResidual kTrained;
  return kTrained;
}

double LearnedResidual::Predict(const ResidualFeatures& features) const {
  const CostResidualTable& t = kCostResidualTable;
  double raw = t.initial;
  for (int tree = 0; tree < t.trees; ++tree) {
    int node = t.roots[tree];
    while (t.feature[node] >= 0) {
      // The trainer's trees hold their inputs as float and compare them with a double
      // threshold; rounding the same way takes the same branch on every value.
      const double x = static_cast<float>(features[static_cast<size_t>(t.feature[node])]);
      node = x <= t.threshold[node] ? t.left[node] : t.right[node];
    }
    raw += t.learning_rate * t.value[node];
  }
  return raw;
}

bool LearnedResidual::Matches() const {
  const CostResidualTable& t = kCostResidualTable;
  if (t.feature_count != kResidualFeatureCount) return false;
  for (int i = 0; i < t.feature_count; ++i) {
    if (ResidualFeatureNames()[static_cast<size_t>(i)] != t.feature_names[i]) return false;
  }
  return true;
}

bool LearnedResidual::ships() const { return kCostResidualTable.ships; }
std::string_view LearnedResidual::base_version() const { return kCostResidualTable.base_version; }
std::string_view LearnedResidual::device() const { return kCostResidualTable.device; }
int LearnedResidual::trees() const { return kCostResidualTable.trees; }

std::unique_ptr<CostModel> NewCorrectedCostModel(std::unique_ptr<CostModel> analytical,
                                                 const LearnedResidual& residual) {
  return std::make_unique<CorrectedCostModel>(std::move(analytical), residual);
}

bool LearnedResidualApplies(const GpuDevice& device) {
  const LearnedResidual& r = LearnedResidual::Trained();
  return kBaselinesPricedAssembled && r.ships() && r.Matches() &&
         r.base_version() == CostModelVersionName(kCurrentCostModel) && r.device() == device.name;
}

std::unique_ptr<CostModel> NewPricingCostModel(const GpuDevice& device) {
  std::unique_ptr<CostModel> analytical = NewAnalyticalCostModel(device, kCurrentCostModel);
  if (!LearnedResidualApplies(device)) return analytical;
  return NewCorrectedCostModel(std::move(analytical), LearnedResidual::Trained());
}

}  // namespace stitch
