// The GPU step bench's GroupNorm block as stitch.torch lowers it at the benchmark's size
// (testdata/torch_regions/groupnorm_block/): each region over the channels-last storage
// Inductor lays out is modelled within 10% of the same region over row-major storage, the
// forward computing in the stored order; and what ships is never priced above the plans of
// the graph with its layout transposes folded.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "stitch/driver/compile.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/plan/layout_transposes.h"
#include "support/stored_order.h"

namespace stitch {
namespace {

using testing::CountLiveOps;

Graph ImportRegion(const std::string& file) {
  const std::string path =
      std::string(STITCH_SOURCE_DIR) + "/testdata/torch_regions/groupnorm_block/" + file;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  StatusOr<Graph> g = ImportHloModule(text.str());
  EXPECT_TRUE(g.ok()) << path << ": " << g.status().ToString();
  return g.ok() ? *std::move(g) : Graph();
}

CompileResult Planned(const Graph& g) {
  CompileOptions options;
  options.emit_ptx = false;
  StatusOr<CompileResult> r = CompileGraph(g, options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *std::move(r) : CompileResult();
}

struct RegionPair {
  const char* row_major;
  const char* stored;
};

// Each region and its compile over channels-last storage.
constexpr RegionPair kRegions[] = {
    {"01_forward0_region0.hlo", "04_forward0_region0_stored.hlo"},    // GroupNorm + SiLU
    {"02_forward0_region1.hlo", "05_forward0_region1_stored.hlo"},    // GroupNorm + SiLU
    {"03_forward0_region2.hlo", "06_forward0_region2_stored.hlo"},    // the residual add
    {"07_backward1_region0.hlo", "09_backward1_region0_stored.hlo"},  // GroupNorm's backward
    {"08_backward1_region1.hlo", "10_backward1_region1_stored.hlo"},  // GroupNorm's backward
};

TEST(TorchRegions, ChannelsLastRegionsAreModelledWithinTenPercentOfRowMajor) {
  for (const RegionPair& pair : kRegions) {
    SCOPED_TRACE(pair.stored);
    const CompileResult row_major = Planned(ImportRegion(pair.row_major));
    const CompileResult stored = Planned(ImportRegion(pair.stored));
    ASSERT_GT(row_major.cost.seconds, 0);
    EXPECT_LE(stored.cost.seconds, 1.10 * row_major.cost.seconds)
        << "channels-last " << stored.cost.seconds * 1e6 << " us, row-major "
        << row_major.cost.seconds * 1e6 << " us";
  }
}

// GroupNorm's view into groups is a reshape of the NHWC storage: the forward folds through it
// and ships one stitched kernel with no transpose.
TEST(TorchRegions, TheGroupNormForwardComputesInTheStoredOrder) {
  const CompileResult r = Planned(ImportRegion("04_forward0_region0_stored.hlo"));
  EXPECT_EQ(r.shipped, PlannerKind::kStitch);
  EXPECT_EQ(r.plan.kernels.size(), 1u) << Describe(r.graph, r.plan);
  EXPECT_EQ(CountLiveOps(r.graph, OpCode::kTranspose), 0) << ToText(r.graph);
}

// The second backward region also reads a gradient Inductor hands over row-major: its folded
// graph's plans price above the Inductor model's plan of the graph as it came, which ships.
TEST(TorchRegions, WhatShipsIsNeverPricedAboveTheFoldedGraphsPlans) {
  for (const RegionPair& pair : kRegions) {
    SCOPED_TRACE(pair.stored);
    const Graph g = ImportRegion(pair.stored);
    const CompileResult shipped = Planned(g);
    const CompileResult folded = Planned(FoldLayoutTransposes(g).graph);
    EXPECT_LE(shipped.cost.seconds, folded.cost.seconds);
    if (std::string(pair.stored) == "10_backward1_region1_stored.hlo") {
      EXPECT_LT(shipped.cost.seconds, folded.cost.seconds);
      EXPECT_GT(CountLiveOps(shipped.graph, OpCode::kTranspose), 0) << ToText(shipped.graph);
    }
  }
}

}  // namespace
}  // namespace stitch
