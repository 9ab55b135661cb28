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

#include "stitch/driver/compile.h"
#include "stitch/ir/verifier.h"
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
