// Every supported target compiles end to end: the global_stitch kernel carries the
// co-residency annotation its grid barrier depends on, the bundle carries the cost model's
// estimates for the plan and the baseline, and the PTX (and cubin, where the toolkit exists)
// is for that target.
#include <gtest/gtest.h>

#include <set>

#include "stitch/driver/bundle.h"
#include "stitch/driver/compile.h"
#include "stitch/plan/target.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::BatchNormStatistics;

TEST(Targets, EverySupportedTargetGetsAnnotationsAndCosts) {
  const Graph g = BatchNormStatistics(4096, 64);
  for (const Target& target : Target::Supported()) {
    SCOPED_TRACE(target.name());
    CompileOptions options;
    options.codegen.target = target;
    // The stitched plan's global kernel is what this test inspects, whichever plan is cheaper.
    options.never_slower = false;
    StatusOr<CompileResult> r = CompileGraph(g, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    bool global = false;
    for (const CompiledKernel& k : r->kernels) {
      EXPECT_NE(k.ptx.find(".target " + target.llvm_cpu()), std::string::npos) << k.name;
      if (k.kind != KernelKind::kGlobalStitch) continue;
      global = true;
      // ptxas must keep registers low enough for the planned blocks per SM.
      EXPECT_NE(k.ptx.find(".minnctapersm"), std::string::npos) << k.name;
      if (CubinAvailable(options.codegen)) {
        EXPECT_FALSE(k.cubin.empty()) << k.name;
      }
    }
    EXPECT_TRUE(global) << Describe(g, r->plan);

    const v1::KernelBundle bundle = ToBundle(*r, options);
    EXPECT_EQ(bundle.target(), target.arch());  // what the loader chooses an image by
    EXPECT_GT(bundle.cost().stitched_seconds(), 0.0);
    EXPECT_GT(bundle.cost().baseline_seconds(), 0.0);
    EXPECT_GT(bundle.cost().baseline_global_bytes(), 0u);
    EXPECT_GT(bundle.cost().baseline_kernels(), 0u);
    EXPECT_EQ(bundle.cost().stitched_kernels(), r->kernels.size());
    // Every plan is priced on this target's device: the stitched plan, both compiler models
    // and the eager model.
    EXPECT_EQ(bundle.cost().shipped(), "stitch");
    std::set<std::string> planners;
    for (const v1::PlanEstimate& p : bundle.cost().plans()) {
      EXPECT_GT(p.seconds(), 0.0) << p.planner();
      planners.insert(p.planner());
    }
    EXPECT_EQ(planners, (std::set<std::string>{"stitch", "xla", "inductor", "eager"}));
  }
}

TEST(Targets, TargetIsPartOfTheKey) {
  const Graph g = BatchNormStatistics(4096, 64);
  std::set<std::string> keys;
  for (const Target& target : Target::Supported()) {
    CompileOptions options;
    options.codegen.target = target;
    options.emit_ptx = false;
    StatusOr<CompileResult> r = CompileGraph(g, options);
    ASSERT_TRUE(r.ok()) << target.name() << ": " << r.status().ToString();
    EXPECT_TRUE(keys.insert(r->key.hex).second) << target.name() << " shares a key";
  }
}

TEST(Targets, ABaselineModelAskedForByNameShipsItsOwnPlan) {
  const Graph g = BatchNormStatistics(4096, 64);
  CompileOptions options;
  options.planner = PlannerKind::kXla;
  options.emit_ptx = false;
  StatusOr<CompileResult> r = CompileGraph(g, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shipped, PlannerKind::kXla);
  EXPECT_EQ(r->plan.planner, "xla");
  EXPECT_DOUBLE_EQ(r->cost.seconds, r->baseline_cost.seconds);
  EXPECT_EQ(r->cost.kernels, static_cast<int>(r->plan.kernels.size()));
}

}  // namespace
}  // namespace stitch
