// BladeDISC's stitch-fusion regression cases (support/bladedisc_cases.h) against BladeDISC's
// own kernel counts: the stitching planner never needs more kernels than BladeDISC does, the
// patterns stitching exists for (layer norm, softmax, a row reduce with its consumers, the
// attention softmax) take exactly one, and every case's kernels match the reference
// interpreter on the emulator in random thread order.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/aliasing.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/reference/shape_scaling.h"
#include "support/bladedisc_cases.h"
#include "support/emulator_check.h"

namespace stitch {
namespace {

const std::vector<testing::BladediscCase>& Cases() {
  static const std::vector<testing::BladediscCase> cases = testing::BladediscCases();
  return cases;
}

std::string InputShapes(const Graph& g) {
  std::string s;
  for (int p : g.Parameters()) s += (s.empty() ? "" : ", ") + g.nodes[p].shape.ToString();
  return s;
}

StatusOr<CompileResult> Compile(const Graph& g, PlannerKind planner = PlannerKind::kStitch) {
  CompileOptions options;
  options.emit_ptx = false;
  options.planner = planner;
  // The oracle counts what stitching needs, so the stitched plan is kept even where a
  // baseline model is priced cheaper.
  options.never_slower = false;
  return CompileGraph(g, options);
}

// The emulator runs these small graphs quickly, so they get a larger budget than the default:
// most cases run at their real shapes.
constexpr int64_t kEmulationBudget = int64_t{1} << 21;

// The graph the emulator runs: the case's own reduced graph, or its full graph scaled by the
// shared rule.
std::optional<Graph> EmulationGraph(const testing::BladediscCase& c) {
  if (c.emulation) return *c.emulation;
  std::optional<ScaledGraph> scaled = ScaleForEmulation(c.graph, kEmulationBudget);
  if (!scaled) return std::nullopt;
  return std::move(scaled->graph);
}

TEST(BladediscOracle, CasesAreValidGraphs) {
  ASSERT_FALSE(Cases().empty());
  for (const testing::BladediscCase& c : Cases()) {
    EXPECT_TRUE(Verify(c.graph).ok()) << c.name << ": " << Verify(c.graph).ToString();
    if (c.emulation) {
      EXPECT_TRUE(Verify(*c.emulation).ok()) << c.name << ": " << Verify(*c.emulation).ToString();
    }
  }
}

// Prints the comparison for the CI log: BladeDISC's count, the stitching planner's and the
// XLA-style baseline's, at the full shapes. The assertions are in the per-case tests below.
TEST(BladediscOracle, KernelCountTable) {
  std::printf("%-42s %-52s %6s %5s %8s\n", "case", "inputs", "oracle", "ours", "baseline");
  for (const testing::BladediscCase& c : Cases()) {
    StatusOr<CompileResult> ours = Compile(c.graph);
    StatusOr<CompileResult> baseline = Compile(c.graph, PlannerKind::kXla);
    EXPECT_TRUE(ours.ok()) << c.name << ": " << ours.status().ToString();
    EXPECT_TRUE(baseline.ok()) << c.name << ": " << baseline.status().ToString();
    auto count = [](const StatusOr<CompileResult>& r) {
      return r.ok() ? std::to_string(r->kernels.size()) : std::string("error");
    };
    std::printf(
        "%-42s %-52s %6d %5s %8s%s\n", c.name.c_str(), InputShapes(c.graph).c_str(),
        c.oracle_kernels, count(ours).c_str(), count(baseline).c_str(),
        ours.ok() && static_cast<int>(ours->kernels.size()) > c.oracle_kernels ? "  (over)" : "");
  }
  std::fflush(stdout);
}

// The attention softmax returns its reshaped scores (BladeDISC returns a view of its input
// there): no plan writes them, the bundle says the output is parameter 0's bytes, and the
// emulator, which binds the parameter's buffer for it, matches the interpreter.
TEST(BladediscOracle, TheReshapedScoresAliasTheirParameter) {
  const Graph g = testing::bladedisc::AttentionSoftmax(1, 2, 16, 64);
  const int scores = g.outputs[0];
  for (PlannerKind planner : {PlannerKind::kStitch, PlannerKind::kXla, PlannerKind::kInductor}) {
    SCOPED_TRACE(std::string(PlannerKindName(planner)));
    StatusOr<CompileResult> r = Compile(g, planner);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->graph.outputs.size(), g.outputs.size());
    for (const KernelSpec& k : r->plan.kernels) {
      for (int o : k.outputs) EXPECT_NE(o, r->graph.outputs[0]) << k.name << " writes the scores";
    }
    const v1::KernelBundle b = ToBundle(*r, CompileOptions{});
    ASSERT_EQ(b.outputs_size(), 4);
    EXPECT_TRUE(b.outputs(0).has_aliases_input());
    EXPECT_EQ(b.outputs(0).aliases_input(), 0);
    EXPECT_EQ(b.outputs(0).bytes(), b.inputs(0).bytes());
    for (int i = 1; i < 4; ++i) EXPECT_FALSE(b.outputs(i).has_aliases_input()) << "output " << i;
    // The lower bound moves no byte for the view: the scores are read, not written.
    const TrafficEstimate bound = TrafficLowerBound(r->graph);
    EXPECT_EQ(bound.bytes_written,
              g.nodes[g.outputs[3]].shape.bytes() + 2 * g.nodes[g.outputs[1]].shape.bytes());
  }
  EXPECT_EQ(AliasedParameter(g, scores), 0);
  testing::EmulatorCheck check;
  EXPECT_TRUE(testing::CheckOnEmulator(g, /*seed=*/77, /*random_order=*/true, &check));
}

class BladediscCase : public ::testing::TestWithParam<size_t> {
 protected:
  const testing::BladediscCase& Case() const { return Cases()[GetParam()]; }
};

TEST_P(BladediscCase, KernelCountWithinOracle) {
  const testing::BladediscCase& c = Case();
  StatusOr<CompileResult> r = Compile(c.graph);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int kernels = static_cast<int>(r->kernels.size());
  EXPECT_LE(kernels, c.oracle_kernels) << "BladeDISC needs " << c.oracle_kernels << "\nplan:\n"
                                       << Describe(r->graph, r->plan);
  if (c.must_be_one) {
    EXPECT_EQ(kernels, 1) << "plan:\n" << Describe(r->graph, r->plan);
  }
  std::printf("%s: oracle %d, ours %d\n", c.name.c_str(), c.oracle_kernels, kernels);
}

TEST_P(BladediscCase, MatchesInterpreterOnEmulator) {
  const testing::BladediscCase& c = Case();
  std::optional<Graph> g = EmulationGraph(c);
  ASSERT_TRUE(g.has_value()) << "no emulation shapes";
  testing::EmulatorCheck check;
  ASSERT_TRUE(
      testing::CheckOnEmulator(*g, /*seed=*/4242 + GetParam(), /*random_order=*/true, &check))
      << ToText(*g);
  EXPECT_LE(check.kernels, c.oracle_kernels) << "at " << InputShapes(*g);
  std::printf("%s at %s: oracle %d, ours %d, max rel error %g\n", c.name.c_str(),
              InputShapes(*g).c_str(), c.oracle_kernels, check.kernels, check.max_rel_error);
}

std::string CaseName(const ::testing::TestParamInfo<size_t>& info) {
  return Cases()[info.param].name;
}

INSTANTIATE_TEST_SUITE_P(Bladedisc, BladediscCase, ::testing::Range<size_t>(0, Cases().size()),
                         CaseName);

}  // namespace
}  // namespace stitch
