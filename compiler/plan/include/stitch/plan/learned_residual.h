// A learned correction to the analytical cost model: gradient-boosted regression trees that
// predict the analytical model's residual, log(measured / modelled), of a plan from a few
// figures the model already has when it prices the plan (its terms, the kernels' mappings,
// the registers and instructions the assembler reported).
//
// The trees are trained by tools/train_cost_residual.py on the kernel times measured on real
// GPUs (testdata/gpu/) and on runtimes that jobs report to stitchd, evaluated on suite rows
// they never saw, and exported as flat arrays into cost_residual_table.cc, which this library
// evaluates without a Python runtime. The correction ships (NewPricingCostModel applies it)
// only where its held-out error beat the analytical model's when the table was trained;
// compiler/plan/COST_MODEL_SOURCES.md, section 7, has the procedure and the comparison.
//
// Thread-safety: everything here is immutable after construction.
#pragma once

#include <array>
#include <memory>
#include <string_view>

#include "stitch/plan/cost_model.h"

namespace stitch {

// The figures the trees read, one plan at a time. The order is the table's: the trainer
// reads them from `cost_model_price --features` (which calls ResidualFeaturesOf), so a change
// here changes the trained table, and the table is refused (LearnedResidual::Matches) unless
// it names the same features in the same order.
enum ResidualFeature : int {
  kResidualKernels,            // kernels in the plan
  kResidualModeledUs,          // the analytical model's estimate, microseconds
  kResidualMemoryShare,        // the kernels' memory terms over the estimate
  kResidualIssueShare,         // the kernels' instruction-issue terms over the estimate
  kResidualFixedShare,         // launch and barrier terms over the estimate
  kResidualDramOverGlobal,     // DRAM bytes (with re-reads and partial sectors) over global bytes
  kResidualBandwidthFraction,  // the slowest kernel's achieved over peak bandwidth
  kResidualKind,               // the slowest kernel's KernelKind, as its enumerator
  kResidualVectorWidth,        // the slowest kernel's vector width
  kResidualRegisters,          // the slowest kernel's registers: the assembler's, else the estimate
  kResidualInstructions,       // the slowest kernel's cubin instructions (0 when not assembled)
  kResidualResidentBlocks,     // the slowest kernel's resident blocks per SM
  kResidualWaves,              // the slowest kernel's blocks over resident slots
  kResidualFeatureCount,
};

using ResidualFeatures = std::array<double, kResidualFeatureCount>;

// The features' names, in order ("kernels", "modeled_us", ...): the column names of
// `cost_model_price --features` and of the table.
const std::array<std::string_view, kResidualFeatureCount>& ResidualFeatureNames();

// The features of `plan`, priced by the analytical model as `cost` (its per-kernel terms, in
// plan order). A plan without kernels, or with an infinite or zero estimate, has all-zero
// features (the correction leaves such a plan alone).
ResidualFeatures ResidualFeaturesOf(const FusionPlan& plan, const PlanCost& cost);

// One trained ensemble of regression trees, as flat arrays (cost_residual_table.cc).
class LearnedResidual {
 public:
  // The table compiled into the library.
  static const LearnedResidual& Trained();

  // Returns the predicted log(measured / modelled) for `features`: the initial value plus
  // the learning rate times each tree's leaf, summed in tree order (as the trainer predicts).
  double Predict(const ResidualFeatures& features) const;

  // Whether the table names the features ResidualFeaturesOf computes, in the same order.
  bool Matches() const;
  // Whether the trainer found that the correction beats the analytical model on held-out
  // suite rows, so that stitchd prices with it.
  bool ships() const;
  // The analytical version whose residual the trees predict ("h100-fit-2"), and the device
  // they were trained on ("H100").
  std::string_view base_version() const;
  std::string_view device() const;
  int trees() const;

 private:
  LearnedResidual() = default;
};

// The analytical model `analytical` (of version residual.base_version()) with each plan's
// estimate, and each kernel's, multiplied by exp(residual.Predict(features)). A kernel is
// corrected as a plan of that kernel alone; a plan's per-kernel costs are scaled by the
// plan's factor, so that they still sum to its estimate.
std::unique_ptr<CostModel> NewCorrectedCostModel(std::unique_ptr<CostModel> analytical,
                                                 const LearnedResidual& residual);

// Whether a bundle's baseline plans are priced from assembled code, as its shipped plan is
// after assembly (compile.cc: RepriceAssembled). The trees learned from plans that were all
// assembled, and read registers and instructions: applied to a shipped plan with them and to
// baselines without, the correction would move one side of every saving and of the
// never-slower choice on features the other lacks. Until the baselines are assembled too, a
// table that ships (beats the analytical model on held-out rows) serves the calibration and
// cost_model_price, not stitchd's prices.
inline constexpr bool kBaselinesPricedAssembled = false;

// Whether stitchd corrects the prices of `device` with the trained table: the baselines are
// priced from assembled code (kBaselinesPricedAssembled), the table ships, it corrects
// kCurrentCostModel, it was trained on this device, and it names the features this library
// computes.
bool LearnedResidualApplies(const GpuDevice& device);

// The model stitchd prices with: kCurrentCostModel's analytical model, corrected by the
// trained table where LearnedResidualApplies.
std::unique_ptr<CostModel> NewPricingCostModel(const GpuDevice& device);

}  // namespace stitch
