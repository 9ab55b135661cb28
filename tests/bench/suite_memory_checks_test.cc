// Memory checks of the code shipped for the suite's 30 rows and for random graphs, measured
// on the emulator without a GPU (EmulatorOptions::count_sectors, MeasureSectorTraffic): each
// kernel runs at its full launch geometry, on lazily mapped buffers of the full shapes, over
// a prefix of its blocks in the GPU's dispatch order, so that row lengths, strides and the
// traffic between two uses of a sector are the real ones. Two signals that predicted slow
// rows on the H100:
//
// - bytes fetched per byte used: a warp access fetches whole 32-byte sectors, so a lane-
//   strided (transposed) read moves 8 (f32) to 16 (bf16) times what it uses;
// - DRAM bytes per distinct byte, through an LRU model of L2 the size of the cost model's
//   fitted re-use window (CostModelParametersFor(H100, kCurrentCostModel)
//   .reuse_window_bytes, 25 MiB): #13's transposed operand, whose sectors served rows 2048
//   rows apart, was read from DRAM again for each of them before its rows were tiled.
//
// A kernel with grid barriers runs all its listed blocks at once, at most 65,536 threads: on
// the suite's shapes that is a part of its persistent grid (printed), whose later phases
// mostly read what the blocks left out read in earlier ones. Those reads count as first
// touches, so the re-reads such a kernel makes between phases (#17, #18 and #20 read their
// input again after a whole-tensor statistic) are not seen here; its sector efficiency and
// its re-reads within a phase are.
//
// The bounds: a coalesced kernel fetches what it uses, and its only excess is at row and
// buffer edges that do not fall on sector boundaries, and in the broadcast operands read by
// every row (which fetch less than they use), so 1.25 leaves room for odd row lengths while
// a transposed read (8x or more) or half-used sectors (2x) fail. A kernel that moves every
// sector once has DRAM bytes equal to its distinct bytes; 1.1 allows a tenth of its traffic
// to be read again (a re-read of per-channel parameters, a loop-mode row evicted at a block
// edge) while #13's re-reads (several times its input) fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/plan/gpu_device.h"
#include "suite/suite.h"
#include "support/known_gaps.h"
#include "support/random_graph.h"

namespace stitch::suite {
namespace {

constexpr double kMaxFetchedPerUsed = 1.25;
constexpr double kMaxDramPerDistinct = 1.1;

// Checks that fail on today's code, each with its cause. A gap that starts passing fails the
// test too, so the list only shrinks.
constexpr testing::KnownGap kKnownGaps[] = {
    {14, "sectors",
     "16 lanes per row, 2 bytes each: rows of 197 f16 (394 bytes) do not start on sector "
     "boundaries, so each half-warp's 32 bytes straddle two sectors (the L1 serves the rest); "
     "the mapping sweep times the rows staged in 16-byte vectors, which no planner ships yet"},
    {28, "sectors",
     "rows of 123 f32 (492 bytes) do not start on sector boundaries and a warp covers rows "
     "in parts, so each part straddles a sector more than it uses; the mapping sweep times the "
     "rows staged in 16-byte vectors, which no planner ships yet"},
};

SectorTrafficOptions H100Options() {
  const GpuDevice* h100 = FindDevice("H100");
  EXPECT_NE(h100, nullptr);
  return SectorTrafficOptionsFor(*h100);
}

// The worst figures over a compiled graph's kernels.
struct Worst {
  double fetched_per_used = 0;
  double dram_per_distinct = 0;
};

// Which of a kernel's figures count towards the worst.
struct Asserted {
  bool sectors = true;
  bool rereads = true;
};

// Measures every shipped kernel of `r`, prints one line per kernel, and returns the worst
// figures of those `asserted` keeps.
template <typename AssertedFn>
Worst Measure(const std::string& what, const CompileResult& r, AssertedFn asserted) {
  Worst w;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<SampledRun> run = MeasureSectorTraffic(r.graph, r.plan, r.kernels, H100Options());
  EXPECT_TRUE(run.ok()) << what << ": " << run.status().ToString();
  if (!run.ok()) return w;
  for (size_t i = 0; i < run->launches.size(); ++i) {
    const SampledLaunch& l = run->launches[i];
    const LaunchStats& s = l.stats;
    auto ratio = [](uint64_t a, uint64_t b) {
      return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
    };
    const double fetched = FetchedPerUsed(s);
    const double dram = DramPerDistinct(s);
    const Asserted counted = asserted(r.plan.kernels[i]);
    std::printf(
        "%s %-26s %-13s %7llu of %7llu blocks%s: used %7.1f MB, fetched/used %5.2f (loads %5.2f, "
        "stores %5.2f), DRAM/distinct %5.2f (loads %5.2f, stores %5.2f)%s\n",
        what.c_str(), l.kernel.c_str(), std::string(KernelKindName(l.kind)).c_str(),
        static_cast<unsigned long long>(l.blocks.size()),
        static_cast<unsigned long long>(l.launch.blocks()),
        r.plan.kernels[i].mapping.grid_barriers > 0 ? " at once" : "",
        static_cast<double>(s.sector_loads.used_bytes + s.sector_stores.used_bytes) / 1e6, fetched,
        ratio(s.sector_loads.fetched_bytes, s.sector_loads.used_bytes),
        ratio(s.sector_stores.fetched_bytes, s.sector_stores.used_bytes), dram,
        ratio(s.sector_loads.dram_bytes, s.sector_loads.distinct_bytes),
        ratio(s.sector_stores.dram_bytes, s.sector_stores.distinct_bytes),
        counted.sectors ? (counted.rereads ? "" : " (re-reads not asserted)")
                        : (counted.rereads ? " (sectors not asserted)" : " (not asserted)"));
    if (r.plan.kernels[i].mapping.grid_barriers > 0 && l.blocks.size() < l.launch.blocks()) {
      std::printf("%s %s: part of a persistent grid, so re-reads between its phases are not seen\n",
                  what.c_str(), l.kernel.c_str());
    }
    if (counted.sectors) w.fetched_per_used = std::max(w.fetched_per_used, fetched);
    if (counted.rereads) w.dram_per_distinct = std::max(w.dram_per_distinct, dram);
  }
  std::printf("%s: measured in %.1f s\n", what.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return w;
}

class SuiteMemoryChecks : public ::testing::TestWithParam<int> {};

TEST_P(SuiteMemoryChecks, ShippedKernelsFetchWhatTheyUseOnce) {
  StatusOr<SuiteEntry> entry = BuildSuiteEntry(GetParam());
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  StatusOr<CompileResult> r = CompileGraph(entry->graph, testing::Sm90Compile());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SectorTrafficOptions o = H100Options();
  std::printf("re-use window %.1f MiB, prefix of %.1f MiB of modelled traffic per launch\n",
              static_cast<double>(o.reuse_window_bytes) / (1 << 20),
              static_cast<double>(o.prefix.model_bytes) / (1 << 20));
  const Worst w =
      Measure("#" + std::to_string(GetParam()), *r, [](const KernelSpec&) { return Asserted{}; });
  for (const auto& [check, value, bound] :
       {std::tuple<std::string, double, double>{"sectors", w.fetched_per_used, kMaxFetchedPerUsed},
        {"rereads", w.dram_per_distinct, kMaxDramPerDistinct}}) {
    const bool ok = value <= bound;
    if (const testing::KnownGap* gap = testing::GapOf(kKnownGaps, GetParam(), check)) {
      EXPECT_FALSE(ok) << "known gap '" << check << "' of #" << GetParam() << " is closed ("
                       << value << " <= " << bound << "): remove it from kKnownGaps (" << gap->why
                       << ")";
      if (!ok)
        std::printf("known gap (%s, %.2f > %.2f): %s\n", check.c_str(), value, bound, gap->why);
    } else {
      EXPECT_LE(value, bound) << (check == "sectors" ? "bytes fetched per byte used"
                                                     : "DRAM bytes per distinct byte");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SuiteMemoryChecks, ::testing::Range(1, kSuiteSize + 1),
                         [](const auto& info) { return "id" + std::to_string(info.param); });

// Random graphs cannot list their gaps, so they are held to coarser bounds: their odd row
// lengths (4097, 50257) and broadcast operands give the half-used sectors per instruction
// that #14, #25 and #28 show (up to 4x), while a read the plan does not know is lane-strided
// fetches 8x (f32) to 16x (f16, bf16). Re-reads are held to the suite's bound.
constexpr double kMaxRandomFetchedPerUsed = 4.0;

TEST(RandomGraphMemoryChecks, ShippedKernelsFetchWhatTheyUseOnce) {
  // Kernels whose plan reads an input transposed (ThreadMapping::strided_input_bytes) fetch
  // a sector per lane until transposes go through shared-memory tiles, and kernels with grid
  // barriers read a tensor again after a whole-tensor statistic where it does not stay on
  // chip (the README's #17, #18, #20): those figures are printed, not asserted.
  // Fixed seeds, those suite_codegen_checks_test starts from, unless
  // STITCH_RANDOM_GRAPH_SEED names others: clock seeds find kernels beyond these bounds on
  // today's code (base 101: seed 104's row_stitch, vector width 8 over rows that are not
  // 16-byte aligned, issues each lane's 8 floats as scalar loads 32 bytes apart, 8x; base
  // 30003: seed 30004's loop kernel, 8x on a load the plan does not call strided), which
  // belong to code generation's list, not this test's.
  const uint64_t base =
      std::getenv("STITCH_RANDOM_GRAPH_SEED") != nullptr ? testing::RandomGraphBaseSeed() : 7100;
  std::printf("random graphs: seeds %llu..%llu (STITCH_RANDOM_GRAPH_SEED=%llu replays them)\n",
              static_cast<unsigned long long>(base), static_cast<unsigned long long>(base + 3),
              static_cast<unsigned long long>(base));
  for (uint64_t seed = base; seed < base + 4; ++seed) {
    testing::RandomGraphBuilder builder =
        testing::RandomGraphBuilder::Large(seed, int64_t{1} << 22);
    const Graph g = builder.Build();
    StatusOr<CompileResult> r = CompileGraph(g, testing::Sm90Compile());
    ASSERT_TRUE(r.ok()) << "seed " << seed << ": " << r.status().ToString();
    const Worst w = Measure("seed " + std::to_string(seed), *r, [](const KernelSpec& k) {
      return Asserted{k.mapping.strided_input_bytes == 0, k.mapping.grid_barriers == 0};
    });
    EXPECT_LE(w.fetched_per_used, kMaxRandomFetchedPerUsed) << "seed " << seed;
    EXPECT_LE(w.dram_per_distinct, kMaxDramPerDistinct) << "seed " << seed;
  }
}

}  // namespace
}  // namespace stitch::suite
