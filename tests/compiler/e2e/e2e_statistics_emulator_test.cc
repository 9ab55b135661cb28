// The plans built on the one-pass statistics and on split column reductions run correctly:
// batch norm (NCHW and NHWC), group norm and layer norm at odd sizes in f32, f16 and bf16,
// and long column reductions, each compiled by the stitching planner and by both baseline
// models, run on the emulator in random thread order and match the reference interpreter; so
// do the unrolled reduction loops at every remainder.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stitch/driver/compile.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"
#include "support/normalization_graphs.h"

namespace stitch {
namespace {

using namespace stitch::testing;

const PlannerKind kPlanners[] = {PlannerKind::kStitch, PlannerKind::kXla, PlannerKind::kInductor};
const DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

int CountOps(const Graph& g, OpCode op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

struct NamedGraph {
  std::string name;
  Graph graph;
};

// Odd extents everywhere, so no vector width, warp or block divides a row.
std::vector<NamedGraph> Normalizations(DType t) {
  return {
      {"batch_norm_nchw", BatchNormForward(t, {3, 5, 13, 11}, 1)},
      {"batch_norm_nhwc", BatchNormForward(t, {3, 13, 11, 7}, 3)},
      {"group_norm", GroupNormSwish(t, 2, 12, 9, 7, 3)},
      {"layer_norm", LayerNorm(t, {37, 301})},
  };
}

TEST(StatisticsOnEmulator, EveryPlannersPlanOfOnePassStatisticsMatchesTheInterpreter) {
  uint64_t seed = 9100;
  for (DType t : kTypes) {
    for (const NamedGraph& c : Normalizations(t)) {
      for (PlannerKind planner : kPlanners) {
        SCOPED_TRACE(c.name + " " + std::string(DTypeName(t)) + " " +
                     std::string(PlannerKindName(planner)));
        EmulatorCheck check;
        ASSERT_TRUE(CheckOnEmulator(c.graph, ++seed, /*random_order=*/true, &check,
                                    /*tolerance_scale=*/1.0, /*never_slower=*/false, planner));
        // The statistics ran in one pass: the shift is a slice of the input.
        EXPECT_GE(CountOps(check.compiled.graph, OpCode::kSlice), 1)
            << ToText(check.compiled.graph);
      }
    }
  }
}

// A column sum over `rows` rows of [rows, cols] in dtype `t`, accumulated in f32.
Graph ColumnSum(DType t, int64_t rows, int64_t cols) {
  Graph g;
  int x = Param(g, {t, {rows, cols}}, 0);
  if (t != DType::kF32) x = Convert(g, x, DType::kF32);
  Output(g, Reduce(g, x, ConstScalar(g, DType::kF32, 0), {0}, ReduceKind::kSum));
  return g;
}

TEST(StatisticsOnEmulator, SplitColumnReductionsMatchTheInterpreter) {
  // Past XLA's 4,096-row bound, with a prime row count so the split pads; few columns, so
  // Inductor splits too.
  uint64_t seed = 9300;
  for (DType t : kTypes) {
    const Graph g = ColumnSum(t, 4099, 3);
    for (PlannerKind planner : kPlanners) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " " + std::string(PlannerKindName(planner)));
      EmulatorCheck check;
      ASSERT_TRUE(CheckOnEmulator(g, ++seed, /*random_order=*/true, &check,
                                  /*tolerance_scale=*/1.0, /*never_slower=*/false, planner));
      if (planner != PlannerKind::kStitch) {
        // The baselines' rewrites split the reduction in two.
        EXPECT_EQ(CountOps(check.compiled.graph, OpCode::kReduce), 2)
            << ToText(check.compiled.graph);
      }
    }
  }
}

// Reduction kernels load several elements per thread before combining them; every remainder
// of a row or column that is not a whole step runs one element at a time. Row and column sums
// of every small length, and a few long ones, match the interpreter.
TEST(StatisticsOnEmulator, UnrolledReductionLoopsCoverEveryRemainder) {
  uint64_t seed = 9500;
  bool unrolled = false;
  const std::vector<int64_t> lengths = {1, 2, 3, 5, 7, 8, 9, 13, 31, 33, 63, 97, 257, 1000, 4099};
  for (int64_t n : lengths) {
    for (bool column : {false, true}) {
      Graph g;
      const Shape shape{DType::kF32,
                        column ? std::vector<int64_t>{n, 37} : std::vector<int64_t>{37, n}};
      const int x = Param(g, shape, 0);
      Output(g, Reduce(g, x, ConstScalar(g, DType::kF32, 0), {column ? 0 : 1}, ReduceKind::kSum));
      SCOPED_TRACE((column ? "column " : "row ") + std::to_string(n));
      EmulatorCheck check;
      ASSERT_TRUE(CheckOnEmulator(g, ++seed, /*random_order=*/true, &check));
      for (const KernelSpec& k : check.compiled.plan.kernels) {
        unrolled = unrolled || k.mapping.loads_per_step > 1;
        for (const KernelSpec& p : k.phases) unrolled = unrolled || p.mapping.loads_per_step > 1;
      }
    }
  }
  EXPECT_TRUE(unrolled) << "no plan loaded more than one element per step";
}

}  // namespace
}  // namespace stitch
