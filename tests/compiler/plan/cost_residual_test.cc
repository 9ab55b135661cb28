// The learned residual (stitch/plan/learned_residual.h): the C++ evaluation of the trained
// table against the trainer's own predictions (cost_residual_expected.tsv, written by
// tools/train_cost_residual.py with the table), the features worked out by hand, and the
// corrected model's arithmetic. The fixture holds every training plan's features and the
// trees' prediction, so a table that no longer matches its fixture, or a fixture whose
// feature columns are not the library's, fails here; that the committed pair is what the
// trainer produces from the committed data is the ctest cost_residual_training.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "stitch/plan/gpu_device.h"
#include "stitch/plan/learned_residual.h"

namespace stitch {
namespace {

const char kFixture[] = STITCH_SOURCE_DIR "/tests/compiler/plan/cost_residual_expected.tsv";

struct ExpectedRow {
  std::string label;  // group, source and plan, for messages
  ResidualFeatures features{};
  double predicted = 0;
};

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, '\t')) fields.push_back(field);
  return fields;
}

// The fixture's rows; fails the test (and returns none) on a malformed file or a header whose
// feature columns are not ResidualFeatureNames().
std::vector<ExpectedRow> ReadFixture() {
  std::ifstream in(kFixture);
  EXPECT_TRUE(in) << "cannot read " << kFixture;
  std::vector<ExpectedRow> rows;
  std::string line;
  bool header = false;
  constexpr size_t kFields = 3 + kResidualFeatureCount + 1;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> fields = SplitTabs(line);
    if (fields.size() != kFields) {
      ADD_FAILURE() << kFixture << ": " << fields.size() << " fields, expected " << kFields;
      return {};
    }
    if (!header) {
      header = true;
      for (int i = 0; i < kResidualFeatureCount; ++i) {
        EXPECT_EQ(fields[3 + static_cast<size_t>(i)], ResidualFeatureNames()[i])
            << "the fixture's feature column " << i << " is not the library's";
      }
      continue;
    }
    ExpectedRow row;
    row.label = fields[0] + " " + fields[1] + " " + fields[2];
    for (size_t i = 0; i < kResidualFeatureCount; ++i) {
      row.features[i] = std::stod(fields[3 + i]);
    }
    row.predicted = std::stod(fields.back());
    rows.push_back(row);
  }
  return rows;
}

TEST(LearnedResidualTest, TableNamesTheLibrarysFeatures) {
  const LearnedResidual& r = LearnedResidual::Trained();
  EXPECT_TRUE(r.Matches());
  EXPECT_EQ(r.base_version(), "h100-fit-2");
  EXPECT_EQ(r.device(), "H100");
  EXPECT_GT(r.trees(), 0);
}

TEST(LearnedResidualTest, EvaluatesAsTheTrainerPredicts) {
  const std::vector<ExpectedRow> rows = ReadFixture();
  // Every training plan: the plans of the suite rows still measured as the checkout compiles
  // them in the four H100 sets, at least three rows (cost_residual_training_test's floor).
  ASSERT_GE(rows.size(), 12u);
  const LearnedResidual& r = LearnedResidual::Trained();
  int distinct = 0;
  for (const ExpectedRow& row : rows) {
    const double predicted = r.Predict(row.features);
    EXPECT_NEAR(predicted, row.predicted, 1e-12) << row.label;
    if (std::abs(row.predicted - rows.front().predicted) > 1e-9) ++distinct;
  }
  // The trees separate the plans, and a table that predicted one constant would pass above
  // only with a constant fixture. Where the plans are too few for a split (at least 12 a
  // leaf), the trees are that constant, the same for any features.
  if (rows.size() >= 24) {
    EXPECT_GT(distinct, 10);
  } else if (distinct == 0) {
    ResidualFeatures elsewhere = rows.front().features;
    for (double& f : elsewhere) f = f * 3 + 1;
    EXPECT_NEAR(r.Predict(elsewhere), rows.front().predicted, 1e-12);
  }
}

KernelSpec Kernel(KernelKind kind, int vector_width, int registers, int assembled_registers,
                  int instructions) {
  KernelSpec k;
  k.kind = kind;
  k.mapping.vector_width = vector_width;
  k.mapping.registers_per_thread = registers;
  k.mapping.assembled_registers = assembled_registers;
  k.mapping.assembled_instructions = instructions;
  return k;
}

KernelCost Cost(double memory, double issue, double launch, double barrier, int64_t global,
                int64_t dram, int resident, double waves, double bandwidth_fraction) {
  KernelCost c;
  c.memory_seconds = memory;
  c.issue_seconds = issue;
  c.launch_seconds = launch;
  c.barrier_seconds = barrier;
  c.seconds = std::max(memory, issue) + launch + barrier;
  c.global_bytes = global;
  c.dram_bytes = dram;
  c.resident_blocks_per_sm = resident;
  c.waves = waves;
  c.bandwidth_fraction = bandwidth_fraction;
  return c;
}

TEST(LearnedResidualTest, FeaturesOfATwoKernelPlan) {
  FusionPlan plan;
  plan.kernels.push_back(Kernel(KernelKind::kLoop, 4, 32, 0, 0));
  plan.kernels.push_back(Kernel(KernelKind::kRowStitch, 8, 64, 72, 500));
  PlanCost cost;
  // 3 + 1 us, then max(10, 12) + 3 + 0.5 us: the second kernel is the slowest.
  cost.per_kernel.push_back(Cost(1e-6, 0, 3e-6, 0, 1000, 1000, 8, 2.0, 0.5));
  cost.per_kernel.push_back(Cost(10e-6, 12e-6, 3e-6, 0.5e-6, 3000, 5000, 2, 1.5, 0.25));
  for (const KernelCost& k : cost.per_kernel) cost.seconds += k.seconds;
  ASSERT_NEAR(cost.seconds, 19.5e-6, 1e-18);

  const ResidualFeatures f = ResidualFeaturesOf(plan, cost);
  EXPECT_EQ(f[kResidualKernels], 2);
  EXPECT_NEAR(f[kResidualModeledUs], 19.5, 1e-12);
  EXPECT_NEAR(f[kResidualMemoryShare], 11.0 / 19.5, 1e-12);
  EXPECT_NEAR(f[kResidualIssueShare], 12.0 / 19.5, 1e-12);
  EXPECT_NEAR(f[kResidualFixedShare], 6.5 / 19.5, 1e-12);
  EXPECT_NEAR(f[kResidualDramOverGlobal], 6000.0 / 4000.0, 1e-12);
  EXPECT_EQ(f[kResidualBandwidthFraction], 0.25);
  EXPECT_EQ(f[kResidualKind], static_cast<double>(static_cast<int>(KernelKind::kRowStitch)));
  EXPECT_EQ(f[kResidualVectorWidth], 8);
  EXPECT_EQ(f[kResidualRegisters], 72);  // the assembler's count, not the estimate's 64
  EXPECT_EQ(f[kResidualInstructions], 500);
  EXPECT_EQ(f[kResidualResidentBlocks], 2);
  EXPECT_EQ(f[kResidualWaves], 1.5);

  // Without the assembler's count, the estimate.
  plan.kernels[1].mapping.assembled_registers = 0;
  EXPECT_EQ(ResidualFeaturesOf(plan, cost)[kResidualRegisters], 64);
}

TEST(LearnedResidualTest, FeaturesOfAnUnpriceablePlanAreZero) {
  FusionPlan plan;
  PlanCost cost;
  EXPECT_EQ(ResidualFeaturesOf(plan, cost), ResidualFeatures{});
  plan.kernels.push_back(Kernel(KernelKind::kLoop, 1, 32, 0, 0));
  cost.per_kernel.push_back(Cost(1e-6, 0, 3e-6, 0, 1, 1, 0, 0, 0));
  cost.seconds = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ResidualFeaturesOf(plan, cost), ResidualFeatures{});
}

// Prices every kernel as a fixed cost, whatever the graph.
class FixedModel : public CostModel {
 public:
  PlanCost Estimate(const Graph& g, const FusionPlan& plan) const override {
    PlanCost cost;
    for (const KernelSpec& k : plan.kernels) {
      cost.per_kernel.push_back(EstimateKernel(g, k));
      cost.seconds += cost.per_kernel.back().seconds;
      cost.global_bytes += cost.per_kernel.back().global_bytes;
    }
    cost.kernels = static_cast<int>(plan.kernels.size());
    return cost;
  }
  KernelCost EstimateKernel(const Graph&, const KernelSpec& k) const override {
    return k.kind == KernelKind::kLoop
               ? Cost(4e-6, 1e-6, 3e-6, 0, 1 << 20, 1 << 20, 8, 3, 0.6)
               : Cost(20e-6, 30e-6, 3e-6, 1e-6, 1 << 24, 1 << 25, 1, 2, 0.3);
  }
};

TEST(LearnedResidualTest, CorrectedModelScalesByTheExponentOfThePrediction) {
  const LearnedResidual& r = LearnedResidual::Trained();
  std::unique_ptr<CostModel> corrected = NewCorrectedCostModel(std::make_unique<FixedModel>(), r);
  FixedModel analytical;
  Graph g;
  FusionPlan plan;
  plan.kernels.push_back(Kernel(KernelKind::kLoop, 4, 32, 30, 200));
  plan.kernels.push_back(Kernel(KernelKind::kRowStitch, 8, 64, 200, 3000));

  const PlanCost base = analytical.Estimate(g, plan);
  const double factor = std::exp(r.Predict(ResidualFeaturesOf(plan, base)));
  const PlanCost cost = corrected->Estimate(g, plan);
  EXPECT_NEAR(cost.seconds, base.seconds * factor, 1e-18);
  ASSERT_EQ(cost.per_kernel.size(), 2u);
  EXPECT_NEAR(cost.per_kernel[0].seconds + cost.per_kernel[1].seconds, cost.seconds, 1e-18);
  EXPECT_NEAR(cost.per_kernel[1].issue_seconds, 30e-6 * factor, 1e-18);
  EXPECT_EQ(cost.global_bytes, base.global_bytes);

  // A kernel alone is corrected as a plan of that kernel.
  FusionPlan one;
  one.kernels.push_back(plan.kernels[1]);
  const PlanCost alone = analytical.Estimate(g, one);
  const double kernel_factor = std::exp(r.Predict(ResidualFeaturesOf(one, alone)));
  EXPECT_NEAR(corrected->EstimateKernel(g, plan.kernels[1]).seconds, alone.seconds * kernel_factor,
              1e-18);
}

TEST(LearnedResidualTest, PricesWithTheCorrectionOnlyWhereItShips) {
  const LearnedResidual& r = LearnedResidual::Trained();
  const GpuDevice& h100 = *FindDevice("H100");
  const bool current = r.base_version() == CostModelVersionName(kCurrentCostModel);
  EXPECT_EQ(LearnedResidualApplies(h100), kBaselinesPricedAssembled && r.ships() && current);
  // Trained on the H100 alone: no other device is corrected.
  EXPECT_FALSE(LearnedResidualApplies(*FindDevice("A100")));

  FusionPlan plan;
  KernelSpec k = Kernel(KernelKind::kLoop, 4, 32, 0, 0);
  k.mapping.launch.grid = {264, 1, 1};
  k.mapping.launch.block = {256, 1, 1};
  k.mapping.work_items = 1 << 22;
  k.mapping.bytes_loaded = 16 << 20;
  k.mapping.bytes_stored = 16 << 20;
  plan.kernels.push_back(k);
  Graph g;
  const double analytical = NewAnalyticalCostModel(h100)->Estimate(g, plan).seconds;
  const double pricing = NewPricingCostModel(h100)->Estimate(g, plan).seconds;
  if (LearnedResidualApplies(h100)) {
    EXPECT_NE(pricing, analytical);
  } else {
    // Not shipped: stitchd prices exactly as the analytical model.
    EXPECT_EQ(pricing, analytical);
  }
}

}  // namespace
}  // namespace stitch
