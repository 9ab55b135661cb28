// gpu_bench --mappings without a GPU: --list prices every candidate mapping of each loop and
// row-stitched kernel of the stitched plans, the shipped one marked; every candidate of every
// suite row's kernels matches the interpreter on the host emulator at the emulation scale, and
// stays in bounds at full geometry on sampled blocks (a GPU runs each at full shape); against the
// stand-in driver each mapping is timed and its outputs compared with the shipped mapping's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/fake_cuda_driver.h"
#include "bench/gpu_command.h"
#include "gpu/code_digest.h"
#include "gpu/mapping_variants.h"
#include "stitch/codegen/sass_summary.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/plan/schedule.h"
#include "stitch/reference/shape_scaling.h"
#include "suite/suite.h"
#include "support/contraction_forms.h"
#include "support/emulator_compare.h"
#include "support/known_gaps.h"

namespace stitch::gpu::test {
namespace {

StatusOr<CompileResult> CompileForEmulator(const Graph& g) {
  CompileOptions options;
  options.emit_ptx = false;
  options.never_slower = false;  // stitch's own plan, as gpu_bench times it
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  return CompileGraph(g, options);
}

// #18's normalize loop: its shipped mapping (8-element vectors on 396 blocks that keep their
// channels, re-chosen with the SMs' block starts) among the scheduler's others, the 2-element
// vectors on 401,408 blocks it shipped before included, one row each, all priced; #16 and #23
// have a loop kernel each, #1 a row-stitched layernorm whose rows fit a warp's registers.
// #18's global kernel has a column phase: its candidates keep 12 or 24 bytes in flight per
// lane, on its own grid or on half of it; and the loop after it joined to it as its last
// phase, beside the two as shipped.
TEST(GpuBenchMappingsTest, ListPricesEveryCandidateOfEachKernel) {
  ScratchDir scratch("mappings_list");
  const std::string csv = scratch.path() + "/mappings.csv";
  CommandResult r = RunCommand(GpuBench() + " --mappings --list --only 1,16,18,23 --csv " + csv);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Loop, row-stitched and global kernels with candidates, and regroupings "
                       "of global kernels' phases: 6 in the stitched plans"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Not run"), std::string::npos) << r.out;
  std::map<std::string, int> shipped;                 // "<id>/<kernel>" -> shipped rows
  std::map<std::string, std::set<std::string>> seen;  // -> mappings
  std::map<std::string, double> regrouped_us;         // regroupings' mapping -> model µs
  std::map<std::string, double> shipped_us;           // "<id>/<kernel>" -> shipped's model µs
  std::set<int> widths_18;
  int assembled = 0;
  for (const auto& row : ReadCsvRows(csv)) {
    const std::string kernel = row.at("id") + "/" + row.at("kernel");
    if (row.at("span") != "1" || row.at("kernels") != "1") {
      EXPECT_EQ(kernel, "18/0");
      EXPECT_EQ(row.at("span"), "2") << row.at("mapping");
      EXPECT_EQ(row.at("kernels"), row.at("shipped") == "1" ? "2" : "1") << row.at("mapping");
      EXPECT_TRUE(row.at("error").empty()) << row.at("error");
      EXPECT_EQ(row.at("code").size(), 16u) << row.at("mapping");
      EXPECT_GT(std::stod(row.at("planning_us")), 0) << row.at("mapping");
      regrouped_us[row.at("mapping")] = std::stod(row.at("model_us"));
      continue;
    }
    EXPECT_GT(std::stoi(row.at("registers_planned")), 0) << kernel;
    // ptxas's figures where the toolkit assembles the cubin; the summary compares them.
    if (!row.at("registers").empty()) {
      ++assembled;
      EXPECT_GT(std::stoi(row.at("registers")), 0) << kernel;
      EXPECT_GT(std::stoi(row.at("instructions")), 0) << kernel;
    }
    shipped[kernel] += row.at("shipped") == "1";
    if (row.at("shipped") == "1") shipped_us[kernel] = std::stod(row.at("model_us"));
    EXPECT_TRUE(seen[kernel].insert(row.at("mapping")).second) << "twice: " << row.at("mapping");
    EXPECT_TRUE(row.at("error").empty()) << row.at("error");
    EXPECT_EQ(row.at("code").size(), 16u) << kernel;  // the kernel's PTX digest
    const double model = std::stod(row.at("model_us"));
    EXPECT_GT(model, 0) << kernel;
    EXPECT_GT(std::stod(row.at("planning_us")), 0) << kernel;
    // Without the stretch memory time can only shrink.
    EXPECT_LE(std::stod(row.at("model_unstretched_us")), model * (1 + 1e-9)) << kernel;
    EXPECT_GE(std::stod(row.at("stretch")), 1.0) << kernel;
    if (row.at("id") == "18" && row.at("kernel") == "1") {
      widths_18.insert(std::stoi(row.at("vector_width")));
    }
  }
  if (assembled > 0) {
    EXPECT_NE(r.out.find("The assembler's registers over the scheduler's estimate, " +
                         std::to_string(assembled) + " mappings: median "),
              std::string::npos)
        << r.out;
  }
  ASSERT_EQ(shipped.size(), 5u);
  for (const auto& [kernel, count] : shipped) {
    EXPECT_EQ(count, 1) << kernel;
    EXPECT_GE(seen[kernel].size(), 4u) << kernel;
  }
  EXPECT_EQ(seen["18/0"],
            (std::set<std::string>{"1024x1 x 264, vector 1, column lanes 24 B in flight",
                                   "1024x1 x 264, vector 1, column lanes 12 B in flight",
                                   "1024x1 x 132, vector 1, column lanes 12 B in flight",
                                   "1024x1 x 132, vector 1, column lanes 24 B in flight"}))
      << r.out;
  EXPECT_EQ(widths_18, (std::set<int>{2, 4, 8}));
  EXPECT_TRUE(seen["18/1"].count("128x1 x 401408, vector 2")) << r.out;
  EXPECT_TRUE(seen["18/1"].count("256x1 x 396, vector 8, columns kept (period 64)")) << r.out;
  // The two kernels as shipped, priced as the sum of their rows above, and joined.
  const std::string as_shipped =
      "as shipped: stitch_k0_global_stitch: 1024x1 x 264, vector 1, column lanes 24 B in flight; "
      "stitch_k1_loop: 256x1 x 396, vector 8, columns kept (period 64)";
  ASSERT_EQ(regrouped_us.size(), 2u) << r.out;
  ASSERT_TRUE(regrouped_us.count(as_shipped)) << r.out;
  EXPECT_NEAR(regrouped_us[as_shipped], shipped_us["18/0"] + shipped_us["18/1"], 0.002);
  EXPECT_EQ(regrouped_us.begin()->first.rfind("as shipped: ", 0), 0u);
  EXPECT_EQ(std::next(regrouped_us.begin())
                ->first.rfind("joined: stitch_k0_global_stitch: 1024x1 x 264, vector 1", 0),
            0u)
      << r.out;
  // #1's rows of 1,536 elements: a warp per row with the row in registers, as shipped, and
  // both fewer threads per row (loop mode) and whole blocks per row among the others.
  EXPECT_TRUE(seen["1/0"].count("32x8 x 512, vector 4, 32 threads per row, 24 values in registers"))
      << r.out;
  EXPECT_TRUE(seen["1/0"].count("32x4 x 512, vector 4, 16 threads per row, loop mode")) << r.out;
  EXPECT_TRUE(
      seen["1/0"].count("256x1 x 4096, vector 1, 256 threads per row, 3 values in registers"))
      << r.out;
}

// #12's rows, kept in shared memory as shipped (4 vectors a thread in flight), are swept with
// 1 and 2 vectors in flight as well, beside the loop-mode mappings the scheduler chose among.
TEST(GpuBenchMappingsTest, ARowInSharedMemoryIsSweptAtEachCountOfVectorsInFlight) {
  ScratchDir scratch("mappings_shared_rows");
  const std::string csv = scratch.path() + "/mappings.csv";
  CommandResult r = RunCommand(GpuBench() + " --mappings --list --only 12 --csv " + csv);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  const std::string shared =
      "1024x1 x 4224, vector 4, 1024 threads per row, 52 values in shared "
      "memory, ";
  std::map<std::string, bool> seen;  // mapping -> shipped
  int loop_mode = 0;
  for (const auto& row : ReadCsvRows(csv)) {
    EXPECT_TRUE(row.at("error").empty()) << row.at("error");
    seen[row.at("mapping")] = row.at("shipped") == "1";
    loop_mode += row.at("mapping").find("loop mode") != std::string::npos;
  }
  EXPECT_EQ(seen[shared + "4 vectors in flight"], true) << r.out;
  EXPECT_EQ(seen.count(shared + "2 vectors in flight"), 1u) << r.out;
  EXPECT_EQ(seen.count(shared + "1 vector in flight"), 1u) << r.out;
  EXPECT_GE(loop_mode, 4) << r.out;
}

// #13's softmax over a transposed operand is swept in resident row tiles (rows held whole in
// the shared-memory tile) of several rows and threads per row beside the tile it ships, which
// holds its rows in registers.
TEST(GpuBenchMappingsTest, TransposedRowsAreSweptInResidentTiles) {
  ScratchDir scratch("mappings_resident_tiles");
  const std::string csv = scratch.path() + "/mappings.csv";
  CommandResult r = RunCommand(GpuBench() + " --mappings --list --only 13 --csv " + csv);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  int resident = 0, shipped_tiles = 0;
  std::set<std::string> distinct;
  for (const auto& row : ReadCsvRows(csv)) {
    EXPECT_TRUE(row.at("error").empty()) << row.at("error");
    const std::string& mapping = row.at("mapping");
    if (mapping.find("resident tile of ") != std::string::npos) {
      ++resident;
      distinct.insert(mapping);
      EXPECT_EQ(row.at("shipped"), "0") << mapping;
      EXPECT_NE(mapping.find(", transpose tile"), std::string::npos) << mapping;
    }
    if (row.at("shipped") == "1")
      shipped_tiles += mapping.find("values in registers, transpose tile") != std::string::npos;
  }
  EXPECT_GE(resident, 4) << r.out;
  EXPECT_EQ(distinct.size(), static_cast<size_t>(resident)) << r.out;
  EXPECT_EQ(shipped_tiles, 1) << r.out;
}

// #19's loop keeps its threads on their channels, which costs it occupancy (55 registers): it
// is swept with two vectors a step beside it, on the same grid and columns, a candidate no
// planner chooses yet. Priced for an H200, whose bandwidth the shipped loop's loads in flight
// do not cover, it is the cheaper; on an H100's they do, and the two price alike.
TEST(GpuBenchMappingsTest, AKeptColumnsLoopIsSweptWithTwoVectorsAStep) {
  ScratchDir scratch("mappings_kept_columns");
  const std::string csv = scratch.path() + "/mappings.csv";
  CommandResult r =
      RunCommand(GpuBench() + " --mappings --list --target sm_90/h200 --only 19 --csv " + csv);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  std::map<std::string, double> kept_us;  // by "shipped" or "two"
  for (const auto& row : ReadCsvRows(csv)) {
    EXPECT_TRUE(row.at("error").empty()) << row.at("error");
    const std::string& mapping = row.at("mapping");
    if (mapping.find("columns kept (period 672)") == std::string::npos) continue;
    const bool two = mapping.find(", 2 vectors a step") != std::string::npos;
    EXPECT_EQ(row.at("shipped"), two ? "0" : "1") << mapping;
    EXPECT_EQ(row.at("blocks"), "1050") << mapping;
    kept_us[two ? "two" : "shipped"] = std::stod(row.at("model_us"));
  }
  ASSERT_EQ(kept_us.size(), 2u) << r.out;
  EXPECT_LT(kept_us["two"], kept_us["shipped"]) << r.out;
}

// #24's transpose (one tile for each of 196 blocks) is swept at blocks of 64, 128, 256 (as
// shipped) and 512 threads: each a tiled kernel with its tile in shared memory, at the vector
// width that lets the block cover a tile in whole rows; then at tiles of two and four times
// the elements (98 and 50 blocks of 256 threads, two and four vectors a thread). #16's loop
// transposes nothing: no tile.
TEST(GpuBenchMappingsTest, ATransposeTileIsSweptAtEachBlockSizeThatCoversATile) {
  StatusOr<suite::SuiteEntry> entry = suite::BuildSuiteEntry(24);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  StatusOr<CompileResult> full = CompileForEmulator(entry->graph);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  StatusOr<std::vector<MappingVariant>> variants = MappingVariants(*full, CodegenOptions{});
  ASSERT_TRUE(variants.ok()) << variants.status().ToString();
  // (block threads, blocks) -> (vector width, vectors a thread)
  std::map<std::pair<uint32_t, uint32_t>, std::pair<int, int>> tiles;
  for (const MappingVariant& v : *variants) {
    const KernelSpec& k = v.compiled.plan.kernels[static_cast<size_t>(v.kernel)];
    if (k.mapping.transpose_tile < 0) continue;
    EXPECT_GT(v.compiled.kernels[static_cast<size_t>(v.kernel)].shared_bytes, 0u) << VariantText(v);
    tiles[{k.mapping.launch.block[0], k.mapping.launch.grid[0]}] = {k.mapping.vector_width,
                                                                    k.mapping.loads_per_step};
  }
  using Tile = std::pair<std::pair<uint32_t, uint32_t>, std::pair<int, int>>;
  EXPECT_EQ(tiles,
            (std::map<std::pair<uint32_t, uint32_t>, std::pair<int, int>>{
                Tile{{64, 196}, {4, 4}}, Tile{{128, 196}, {4, 2}}, Tile{{256, 196}, {4, 1}},
                Tile{{512, 196}, {2, 1}}, Tile{{256, 98}, {4, 2}}, Tile{{256, 50}, {4, 4}}}));

  StatusOr<suite::SuiteEntry> broadcast = suite::BuildSuiteEntry(16);
  ASSERT_TRUE(broadcast.ok()) << broadcast.status().ToString();
  StatusOr<CompileResult> loop = CompileForEmulator(broadcast->graph);
  ASSERT_TRUE(loop.ok()) << loop.status().ToString();
  EXPECT_TRUE(TransposeTileMappingCandidates(loop->graph, loop->plan.kernels[0],
                                             CodegenOptions{}.target.device())
                  .empty());
}

// tools/fit_cost_model.py joins a sweep's measured times with cost_model_price --mappings on
// id, kernel, mapping and code: both tools must enumerate the same mappings and the same code,
// and price them alike (the current model: gpu_bench's model_us, cost_model_price without
// --parameters), and a candidate set of constants must move the prices.
TEST(GpuBenchMappingsTest, CostModelPriceListsThePricesOfTheSweepsMappings) {
  ScratchDir scratch("mappings_price");
  const std::string& dir = scratch.path();
  const std::string only = " --only 4,16,20";
  CommandResult sweep =
      RunCommand(GpuBench() + " --mappings --list" + only + " --csv " + dir + "/mappings.csv");
  ASSERT_EQ(sweep.exit_status, 0) << sweep.err << sweep.out;
  WriteFile(dir + "/sets.json", "[{}, {\"dram_latency_seconds\": 4e-6}]");
  std::filesystem::create_directories(dir + "/kernels");
  CommandResult price =
      RunCommand(CostModelPrice() + only + " --parameters " + dir + "/sets.json --mappings " + dir +
                 "/priced.csv --ptx " + dir + "/kernels --csv " + dir + "/plans.csv");
  ASSERT_EQ(price.exit_status, 0) << price.err << price.out;

  std::map<std::string, std::map<std::string, std::string>> swept;  // id/kernel/mapping -> row
  size_t regroupings = 0;
  for (const auto& row : ReadCsvRows(dir + "/mappings.csv")) {
    EXPECT_EQ(row.at("code").size(), 16u) << row.at("mapping");
    // A regrouping's time is a sum of kernels, which the fit leaves out and so does the price.
    if (row.at("span") != "1" || row.at("kernels") != "1") {
      ++regroupings;
      continue;
    }
    swept[row.at("id") + "/" + row.at("kernel") + "/" + row.at("mapping")] = row;
  }
  EXPECT_GT(regroupings, 0u);  // #20's normalize loop apart from its global kernel
  ASSERT_GE(swept.size(), 10u);
  std::map<std::string, double> slower;  // id/kernel/mapping -> set 1's price over set 0's
  size_t in_set_0 = 0;
  for (const auto& row : ReadCsvRows(dir + "/priced.csv")) {
    const std::string key = row.at("id") + "/" + row.at("kernel") + "/" + row.at("mapping");
    ASSERT_TRUE(swept.count(key)) << "priced, not swept: " << key;
    const auto& s = swept[key];
    EXPECT_EQ(row.at("code"), s.at("code")) << key;
    EXPECT_EQ(row.at("shipped"), s.at("shipped")) << key;
    EXPECT_EQ(row.at("kernel_name"), s.at("kernel_name")) << key;
    EXPECT_EQ(row.at("registers"), s.at("registers")) << key;
    // What the static checks read of its loads in flight: a thread's burst, from the SASS
    // where the build found nvdisasm, and the SM's share.
    const int burst = std::stoi(row.at("load_burst_bytes"));
    EXPECT_GT(burst, 0) << key;
    EXPECT_GE(std::stoll(row.at("in_flight_per_sm")), burst) << key;
    EXPECT_EQ(row.at("load_burst_from"), DefaultNvdisasmPath().empty() ? "ptx" : "sass") << key;
    const double us = std::stod(row.at("model_us"));
    if (row.at("set") == "0") {
      ++in_set_0;
      // --ptx writes the re-mapped kernel, whose digest is the row's code.
      CompiledKernel kernel;
      kernel.name = row.at("kernel_name");
      kernel.ptx = ReadFile(dir + "/kernels/" + row.at("id") + "_mapping" +
                            (row.at("shipped") == "1" ? "_shipped" : row.at("candidate")) + "_" +
                            kernel.name + ".ptx");
      EXPECT_EQ(CodeDigest({kernel}), row.at("code")) << key;
      EXPECT_NEAR(us, std::stod(s.at("model_us")), 0.0005 + 1e-9) << key;
      slower[key] = us;
    } else {
      ASSERT_EQ(row.at("set"), "1");
      slower[key] = us / slower[key];
    }
  }
  EXPECT_EQ(in_set_0, swept.size());
  // 4 µs, about ten times the fitted latency, starves Little's law on some mapping and speeds
  // up none.
  double most = 0;
  for (const auto& [key, ratio] : slower) {
    EXPECT_GE(ratio, 1.0 - 1e-9) << key;
    most = std::max(most, ratio);
  }
  EXPECT_GT(most, 1.5);
}

// A candidate is assembled as the compiler would assemble it if it shipped (AssembleKernel):
// fused multiply-adds where they cost nothing, and the unfused form where fusing spills or
// costs a block per SM. Each candidate of the rows whose kernels come near an occupancy step
// (#1's and #4's rows, #2's dropout, #20's grid-barrier kernel) is assembled both ways again
// here: the swept one is one of the two, never the worse by local memory then blocks per SM,
// and the fused one wherever that fares as well. #20's global kernel with 12 bytes in flight a
// lane spills 108 bytes fused under its grid barrier's register cap and 12 unfused: a sweep
// that assembled every candidate fused would time code no plan ships.
TEST(GpuBenchMappingsTest, CandidatesAreAssembledAsTheyWouldShip) {
  CompileOptions options = testing::Sm90Compile();
  if (!CubinAvailable(options.codegen)) GTEST_SKIP() << "no assembler: no registers to compare";
  options.never_slower = false;  // stitch's own plan, as gpu_bench times it
  const GpuDevice& device = options.codegen.target.device();
  int candidates = 0;
  int unfused = 0;
  for (int id : {1, 2, 4, 20}) {
    StatusOr<suite::SuiteEntry> entry = suite::BuildSuiteEntry(id);
    ASSERT_TRUE(entry.ok()) << entry.status().ToString();
    StatusOr<CompileResult> compiled = CompileGraph(entry->graph, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    StatusOr<std::vector<MappingVariant>> variants = MappingVariants(*compiled, options.codegen);
    ASSERT_TRUE(variants.ok()) << variants.status().ToString();
    for (const MappingVariant& v : *variants) {
      if (v.shipped() || v.regrouped()) continue;
      const CompiledKernel& swept = v.compiled.kernels[v.kernel];
      StatusOr<testing::ContractionForms> forms = testing::AssembleBothWays(swept, options.codegen);
      ASSERT_TRUE(forms.ok()) << forms.status().ToString();
      const std::string what = "#" + std::to_string(id) + " candidate " +
                               std::to_string(v.candidate) + " of " + swept.name;
      const bool fused = testing::ExpectAssembledAsTheDriverChooses(
          swept, *forms, v.compiled.plan.kernels[v.kernel].mapping, device, what);
      ++candidates;
      unfused += !fused;
    }
  }
  std::printf("%d of %d candidates swept unfused\n", unfused, candidates);
  EXPECT_GT(candidates, 8);
  EXPECT_GE(unfused, 1);
}

TEST(GpuBenchMappingsTest, RefusesToSweepMappingsOfBuckets) {
  ExpectRefused(RunCommand(GpuBench() + " --list --mappings --buckets --only 1"),
                "--buckets and --mappings each replace the three planners");
}

// Every variant gpu_bench --mappings would run, on the emulator: the results of each
// candidate of each kernel, and of each regrouping of a global kernel's phases, against the
// interpreter at the emulation scale, and every access of sampled blocks bounds-checked at
// full geometry.
class MappingVariantRowTest : public ::testing::TestWithParam<int> {};

TEST_P(MappingVariantRowTest, EveryCandidateMatchesTheInterpreterAndStaysInBounds) {
  StatusOr<suite::SuiteEntry> entry = suite::BuildSuiteEntry(GetParam());
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  CodegenOptions codegen;
  std::optional<ScaledGraph> scaled = ScaleForEmulation(entry->graph);
  ASSERT_TRUE(scaled.has_value());
  StatusOr<CompileResult> small = CompileForEmulator(scaled->graph);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  StatusOr<std::vector<MappingVariant>> variants = SweptVariants(*small, codegen);
  ASSERT_TRUE(variants.ok()) << variants.status().ToString();
  const uint64_t seed = 5000 + static_cast<uint64_t>(GetParam());
  const std::vector<Tensor> inputs = stitch::testing::RandomInputs(scaled->graph, seed);
  for (const MappingVariant& v : *variants) {
    if (v.shipped()) continue;
    // The kernel that runs is the one emitted for the candidate's mapping.
    const size_t k = static_cast<size_t>(v.kernel);
    EXPECT_EQ(v.compiled.kernels[k].launch.grid, v.compiled.plan.kernels[k].mapping.launch.grid);
    EXPECT_EQ(v.compiled.kernels[k].launch.block, v.compiled.plan.kernels[k].mapping.launch.block);
    EXPECT_NE(v.compiled.kernels[k].portable_ir, small->kernels[k].portable_ir);
    EXPECT_TRUE(stitch::testing::EmulatedMatchesInterpreter(
        scaled->graph, v.compiled.graph, v.compiled.kernels, inputs, seed, /*random_order=*/false))
        << "kernel " << v.kernel << " under " << VariantText(v);
  }

  StatusOr<CompileResult> full = CompileForEmulator(entry->graph);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  StatusOr<std::vector<MappingVariant>> full_variants = SweptVariants(*full, codegen);
  ASSERT_TRUE(full_variants.ok()) << full_variants.status().ToString();
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
  ASSERT_TRUE(emulator.ok()) << emulator.status().ToString();
  BlockSampling sampling;
  sampling.seed = seed;
  for (const MappingVariant& v : *full_variants) {
    if (v.shipped()) continue;
    StatusOr<SampledRun> run = RunSampledOnEmulator(v.compiled.graph, v.compiled.plan,
                                                    v.compiled.kernels, sampling, **emulator);
    EXPECT_TRUE(run.ok()) << "kernel " << v.kernel << " under " << VariantText(v) << ": "
                          << run.status().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Suite, MappingVariantRowTest, ::testing::Range(1, suite::kSuiteSize + 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "row" + std::to_string(info.param);
                         });

// The sweep end to end against the stand-in driver, which runs no kernel: each mapping gets
// its kernel's own time among the plan's, and the outputs of each candidate's plan are
// compared with the shipped plan's.
TEST(GpuBenchMappingsTest, FakeDriverTimesEachMappingAndComparesItsOutputs) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ScratchDir scratch("mappings_fake");
  const std::string& dir = scratch.path();
  CommandResult r =
      RunCommand(GpuBench() + " --mappings --driver " + FakeDriver() + " --profiler " +
                 FakeDriver() + " --only 1,16 --warmup 1 --repeats 3 --out-dir " + dir);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_EQ(r.err.find("fake cuda:"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Timed 2 kernels."), std::string::npos) << r.out;
  const auto rows = ReadCsvRows(dir + "/mappings.csv");
  ASSERT_GE(rows.size(), 8u);
  for (const auto& row : rows) {
    EXPECT_GT(std::stod(row.at("kernel_us")), 0) << row.at("mapping");
    EXPECT_EQ(row.at("matches"), row.at("shipped") == "1" ? "-" : "yes") << row.at("mapping");
    EXPECT_TRUE(row.at("error").empty()) << row.at("error");
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/device.json"));
  // The CSV is rewritten whole after each suite row, by rename: nothing is left beside it. The
  // table's header comes once, each row's lines as the row finishes.
  EXPECT_FALSE(std::filesystem::exists(dir + "/mappings.csv.partial"));
  size_t headers = 0;
  for (size_t at = r.out.find("| id | kernel | mapping |"); at != std::string::npos;
       at = r.out.find("| id | kernel | mapping |", at + 1)) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u) << r.out;
  EXPECT_LT(r.out.find("| 1 | stitch_k0_row_stitch"), r.out.find("| 16 | stitch_k0_loop")) << r.out;
}

// #20's global kernel ends in a loop phase (batch norm's normalize): the sweep times it apart
// as well, the global kernel of the column phases and the loop of its own under each loop
// mapping, their outputs compared with the shipped plan's.
TEST(GpuBenchMappingsTest, FakeDriverTimesALoopPhaseApartFromItsGlobalKernel) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ScratchDir scratch("mappings_apart");
  const std::string& dir = scratch.path();
  CommandResult r =
      RunCommand(GpuBench() + " --mappings --driver " + FakeDriver() + " --profiler " +
                 FakeDriver() + " --only 20 --warmup 1 --repeats 3 --out-dir " + dir);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  int apart = 0;
  for (const auto& row : ReadCsvRows(dir + "/mappings.csv")) {
    EXPECT_EQ(row.at("kernel"), "0");
    EXPECT_EQ(row.at("span"), "1");
    EXPECT_TRUE(row.at("error").empty()) << row.at("error");
    EXPECT_GT(std::stod(row.at("kernel_us")), 0) << row.at("mapping");
    if (row.at("kernels") == "1") continue;
    ++apart;
    EXPECT_EQ(row.at("kernels"), "2");
    EXPECT_EQ(row.at("shipped"), "0");
    EXPECT_EQ(row.at("matches"), "yes") << row.at("mapping");
    EXPECT_EQ(row.at("mapping").rfind("apart: stitch_k0_global_stitch: 1024x1 x 264", 0), 0u)
        << row.at("mapping");
    EXPECT_NE(row.at("mapping").find("; stitch_k0_global_stitch_loop: "), std::string::npos)
        << row.at("mapping");
  }
  EXPECT_GE(apart, 2) << r.out;
}

}  // namespace
}  // namespace stitch::gpu::test
