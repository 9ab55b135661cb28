// The shipped kernels of real training steps and of random graphs, run as they ship: each
// graph is compiled for sm_90's own grid at its real (or large) shapes, and its kernels run
// at full geometry on a sample of blocks with every global access bounds-checked
// (RunSampledOnEmulator). The benchmark suite's rows get the same run in suite_test.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "stitch/driver/compile.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/verifier.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

constexpr int kShards = 4;

CompileOptions ShippedOptions() {
  CompileOptions options;
  options.codegen.target = *Target::Parse("sm_90");
  // The portable IR is what the emulator runs; PTX is made from the same module.
  options.emit_ptx = false;
  return options;
}

// What the sampled runs of a test covered.
struct Coverage {
  int graphs = 0;
  int launches = 0;
  int grid_barrier_launches = 0;
  uint64_t blocks_run = 0;
  uint64_t blocks_total = 0;

  void Print(const std::string& what) const {
    std::printf(
        "%s: %d graphs, %d launches (%d with grid barriers), %llu of %llu blocks "
        "sampled at full geometry, 0 out of bounds\n",
        what.c_str(), graphs, launches, grid_barrier_launches,
        static_cast<unsigned long long>(blocks_run), static_cast<unsigned long long>(blocks_total));
  }
};

// Compiles `g` as stitchd would ship it and runs the sampled full-geometry check, adding
// what ran to `coverage`.
::testing::AssertionResult ShippedKernelsStayInBounds(const Graph& g, uint64_t seed,
                                                      Coverage& coverage) {
  StatusOr<CompileResult> compiled = CompileGraph(g, ShippedOptions());
  if (!compiled.ok()) return ::testing::AssertionFailure() << compiled.status().ToString();
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
  if (!emulator.ok()) return ::testing::AssertionFailure() << emulator.status().ToString();
  BlockSampling sampling;
  sampling.seed = seed;
  StatusOr<SampledRun> run = RunSampledOnEmulator(compiled->graph, compiled->plan,
                                                  compiled->kernels, sampling, **emulator);
  if (!run.ok()) {
    return ::testing::AssertionFailure() << run.status().ToString() << "\nplan:\n"
                                         << Describe(compiled->graph, compiled->plan);
  }
  if (run->launches.size() != compiled->kernels.size()) {
    return ::testing::AssertionFailure()
           << "ran " << run->launches.size() << " of " << compiled->kernels.size() << " kernels";
  }
  ++coverage.graphs;
  for (const SampledLaunch& l : run->launches) {
    ++coverage.launches;
    if (l.stats.grid_barriers > 0) ++coverage.grid_barrier_launches;
  }
  coverage.blocks_run += run->blocks_run();
  coverage.blocks_total += run->blocks_total();
  return ::testing::AssertionSuccess();
}

// The training steps of testdata/models (README.md there says how they were made), each
// cut into its memory-intensive subgraphs as stitchd's Extract does.
const char* const kModels[] = {"bert_base_mlm_train_bs32", "resnet50_train_bs32",
                               "gpt2_small_train_bs8", "dlrm_criteo_train_bs2048"};

std::vector<Graph> ModelSubgraphs(const std::string& model) {
  std::ifstream in(std::string(STITCH_SOURCE_DIR) + "/testdata/models/" + model + ".hlo");
  std::stringstream text;
  text << in.rdbuf();
  HloImportOptions options;
  options.source_name = model + ".hlo";
  StatusOr<std::vector<Graph>> graphs = ExtractMemoryIntensiveSubgraphs(text.str(), options);
  return graphs.ok() ? std::move(graphs).value() : std::vector<Graph>{};
}

class ModelSubgraphsAtRealShapes : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ModelSubgraphsAtRealShapes, ShippedKernelsStayInBounds) {
  const auto [model, shard] = GetParam();
  const std::string name = kModels[model];
  const std::vector<Graph> graphs = ModelSubgraphs(name);
  ASSERT_FALSE(graphs.empty()) << "no subgraphs extracted from " << name;
  Coverage coverage;
  for (size_t i = static_cast<size_t>(shard); i < graphs.size(); i += kShards) {
    SCOPED_TRACE(graphs[i].name);
    ASSERT_TRUE(ShippedKernelsStayInBounds(graphs[i], 100 + i, coverage));
  }
  coverage.Print(name + " shard " + std::to_string(shard) + " at real shapes");
}

INSTANTIATE_TEST_SUITE_P(Models, ModelSubgraphsAtRealShapes,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Range(0, kShards)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::string(kModels[std::get<0>(info.param)]) + "_shard" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Random graphs (support/random_graph.h) at model-sized shapes, 2^20 to 2^24 elements, where
// the scheduler picks the grids and splits that ship for real models. Each run draws a new
// base seed and logs it; graph i uses base + i (STITCH_RANDOM_GRAPH_SEED replays a run).
constexpr int kRandomGraphs = 100;
constexpr int64_t kLargeElements = int64_t{1} << 24;

class LargeRandomGraphs : public ::testing::TestWithParam<int> {};

TEST_P(LargeRandomGraphs, ShippedKernelsStayInBounds) {
  const uint64_t base = testing::RandomGraphBaseSeed();
  std::printf("large random graphs: base seed %llu, shard %d\n",
              static_cast<unsigned long long>(base), GetParam());
  Coverage coverage;
  for (int i = GetParam(); i < kRandomGraphs; i += kShards) {
    const uint64_t seed = base + static_cast<uint64_t>(i);
    Graph g = testing::RandomGraphBuilder::Large(seed, kLargeElements).Build();
    ASSERT_TRUE(Verify(g).ok()) << "seed " << seed << ": " << Verify(g).ToString();
    ASSERT_TRUE(ShippedKernelsStayInBounds(g, seed, coverage)) << "seed " << seed << "\n"
                                                               << ToText(g);
  }
  coverage.Print("large random graphs shard " + std::to_string(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Shards, LargeRandomGraphs, ::testing::Range(0, kShards));

}  // namespace
}  // namespace stitch
