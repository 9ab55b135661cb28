// The GPU step bench's GroupNorm block as stitch.torch lowers it at the benchmark's size
// (testdata/torch_regions/groupnorm_block/): each region over the channels-last storage
// Inductor lays out is modelled within 10% of the same region over row-major storage, the
// forward computing in the stored order; what ships is never priced above the plans of the
// graph with its layout transposes folded; and the shipped kernels' sector efficiency and
// re-reads, measured on the emulator, with the regions that fetch more than they use listed.
// The ResNet blocks' channels-last batch norm backward regions (testdata/torch_regions/
// resnet_basic_block/ and resnet50_bottleneck/) read every input in its stored order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/layout_transposes.h"
#include "support/known_gaps.h"
#include "support/stored_order.h"

namespace stitch {
namespace {

using testing::CountLiveOps;

Graph ImportRegion(const std::string& file, const std::string& folder = "groupnorm_block") {
  const std::string path =
      std::string(STITCH_SOURCE_DIR) + "/testdata/torch_regions/" + folder + "/" + file;
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

// What ships is never priced above the folded graph's plans.
TEST(TorchRegions, WhatShipsIsNeverPricedAboveTheFoldedGraphsPlans) {
  for (const RegionPair& pair : kRegions) {
    SCOPED_TRACE(pair.stored);
    const Graph g = ImportRegion(pair.stored);
    const CompileResult shipped = Planned(g);
    const CompileResult folded = Planned(FoldLayoutTransposes(g).graph);
    EXPECT_LE(shipped.cost.seconds, folded.cost.seconds);
  }
}

// The fold is a choice: at the step bench's small size, where launches dominate, the folded
// GroupNorm forward plans a kernel more than the graph as it came, whose plan ships.
TEST(TorchRegions, TheGraphAsItCameShipsWhereItPricesLower) {
  const Graph g = ImportRegion("04_forward0_region0_stored.hlo", "groupnorm_block_small");
  const CompileResult shipped = Planned(g);
  const CompileResult folded = Planned(FoldLayoutTransposes(g).graph);
  EXPECT_LT(shipped.cost.seconds, folded.cost.seconds)
      << shipped.cost.seconds * 1e6 << " us against " << folded.cost.seconds * 1e6 << " us";
  EXPECT_GT(CountLiveOps(shipped.graph, OpCode::kTranspose), 0) << ToText(shipped.graph);
}

// The second backward region as it came plans, in the Inductor model, one row-stitched kernel
// that reads the NHWC tensors along NCHW rows: a 32-byte sector for each f32 element. The
// neighbouring channels' blocks use the rest of each sector while it is in L2, so DRAM moves
// every byte once, and the model used to price the plan as a coalesced one (62.3 us, where
// the folded graph's one global kernel prices 65.5) and ship it. L2 still moves every sector,
// eight times the bytes used: priced so, the folded kernel ships.
TEST(TorchRegions, AKernelReadingTheStorageAcrossItsOrderIsPricedForItsSectors) {
  const Graph g = ImportRegion("10_backward1_region1_stored.hlo");
  const GpuDevice& device = *FindDevice("H100");
  StatusOr<BaselinePlan> across = PlanInductorModel(g, device);
  ASSERT_TRUE(across.ok()) << across.status().ToString();
  const auto strided = std::find_if(
      across->plan.kernels.begin(), across->plan.kernels.end(), [](const KernelSpec& k) {
        return k.mapping.strided_input_bytes > 0 &&
               k.mapping.strided_sector_bytes == 8 * k.mapping.strided_input_bytes;
      });
  ASSERT_NE(strided, across->plan.kernels.end()) << Describe(across->graph, across->plan);

  const CompileResult shipped = Planned(g);
  EXPECT_EQ(shipped.shipped, PlannerKind::kStitch);
  EXPECT_EQ(CountLiveOps(shipped.graph, OpCode::kTranspose), 0) << ToText(shipped.graph);
  EXPECT_EQ(shipped.plan.kernels.size(), 1u) << Describe(shipped.graph, shipped.plan);
  const PlanCost priced =
      NewAnalyticalCostModel(device, kCurrentCostModel)->Estimate(across->graph, across->plan);
  EXPECT_GT(priced.seconds, 1.5 * shipped.cost.seconds);
}

// The regions whose shipped kernels fetch more than 1.25 bytes per byte used (the suite's
// bound, suite_memory_checks_test), each with its cause and the most it fetches today. A
// region that starts passing fails the test too, so the list only shrinks, and one that
// fetches more than its bound fails it.
struct SectorGap {
  const char* file;
  double bound;
  const char* why;
};
constexpr SectorGap kSectorGaps[] = {
    {"04_forward0_region0_stored.hlo", 1.31,
     "1.30: the statistics' phase reads each group's 4 channels, 16 bytes of each 512-byte "
     "NHWC row, apart from the next group's, so its warps use half of every sector"},
    {"05_forward0_region1_stored.hlo", 1.31, "1.30: as 04"},
};

// Every shipped kernel of every region, measured on the emulator at its full geometry
// (MeasureSectorTraffic, as suite_memory_checks_test measures the suite): DRAM bytes per
// distinct byte within 1.1, and bytes fetched per byte used within 1.25 but for the regions
// listed above, within their bounds. The cost model prices the sectors of reads through a
// transpose, not those of short runs in the stored order (04's and 05's); these figures say where
// the GPU may find these kernels slower than their model.
TEST(TorchRegions, ShippedKernelsFetchWhatTheyUse) {
  const SectorTrafficOptions options = SectorTrafficOptionsFor(*FindDevice("H100"));
  for (const RegionPair& pair : kRegions) {
    for (const char* file : {pair.row_major, pair.stored}) {
      SCOPED_TRACE(file);
      StatusOr<CompileResult> r = CompileGraph(ImportRegion(file), testing::Sm90Compile());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      StatusOr<SampledRun> run = MeasureSectorTraffic(r->graph, r->plan, r->kernels, options);
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      double worst = 0;
      for (const SampledLaunch& l : run->launches) {
        std::printf("%s %-28s fetched/used %.2f, DRAM/distinct %.2f\n", file, l.kernel.c_str(),
                    FetchedPerUsed(l.stats), DramPerDistinct(l.stats));
        worst = std::max(worst, FetchedPerUsed(l.stats));
        EXPECT_LE(DramPerDistinct(l.stats), 1.1) << l.kernel;
      }
      const auto gap =
          std::find_if(std::begin(kSectorGaps), std::end(kSectorGaps),
                       [&](const SectorGap& g) { return std::string(g.file) == file; });
      if (gap != std::end(kSectorGaps)) {
        EXPECT_GT(worst, 1.25) << "known gap closed: remove it from kSectorGaps (" << gap->why
                               << ")";
        EXPECT_LE(worst, gap->bound) << gap->why;
      } else {
        EXPECT_LE(worst, 1.25);
      }
    }
  }
}

// The ResNet blocks' batch norm backward over channels-last storage reads the gradient
// row-major beside the input and the ReLU's mask (pred) stored NHWC, and writes NHWC. The
// fold computes it in NHWC order with the gradient read transposed (FoldLayoutTransposes),
// which a tile transposes in a kernel of its own, so every shipped kernel reads its inputs in
// their stored order, none a sector per element. The BasicBlock's has 64 channels, the
// Bottleneck's 256.
TEST(TorchRegions, AChannelsLastBatchNormBackwardReadsEveryInputInItsStoredOrder) {
  const SectorTrafficOptions options = SectorTrafficOptionsFor(*FindDevice("H100"));
  for (const auto& [folder, file] :
       {std::pair{"resnet_basic_block", "07_backward1_region0_stored.hlo"},
        std::pair{"resnet50_bottleneck", "10_backward1_region0_stored.hlo"}}) {
    SCOPED_TRACE(std::string(folder) + "/" + file);
    StatusOr<CompileResult> r = CompileGraph(ImportRegion(file, folder), testing::Sm90Compile());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    int tiles = 0;
    for (const KernelSpec& k : r->plan.kernels) {
      EXPECT_EQ(k.mapping.strided_input_bytes, 0) << k.name << "\n" << Describe(r->graph, r->plan);
      if (k.mapping.transpose_tile >= 0) ++tiles;
    }
    EXPECT_GE(tiles, 1) << Describe(r->graph, r->plan);
    StatusOr<SampledRun> run = MeasureSectorTraffic(r->graph, r->plan, r->kernels, options);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    for (const SampledLaunch& l : run->launches) {
      std::printf("%s %-28s fetched/used %.2f, DRAM/distinct %.2f\n", folder, l.kernel.c_str(),
                  FetchedPerUsed(l.stats), DramPerDistinct(l.stats));
      EXPECT_LE(FetchedPerUsed(l.stats), 1.25) << l.kernel;
      // DRAM bytes per distinct byte are printed, not bounded: the output phase reads the
      // inputs again once the statistics are complete, more than L2 holds (ForcedRereadBytes).
    }
  }
}

}  // namespace
}  // namespace stitch
