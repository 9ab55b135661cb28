// Property test through the real command line: random small graphs, written as binary
// stitch.v1.Graph files, run with `stitchctl run --emulate` as a user would. Every graph the
// compiler accepts must run on the emulator (none refused for its launch size) and match the
// reference interpreter. The base seed is new each run and logged; graph i uses base + i,
// and STITCH_RANDOM_GRAPH_SEED replays a run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "stitch/ir/graph_proto.h"
#include "stitch/ir/verifier.h"
#include "support/command.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

namespace fs = std::filesystem;

constexpr int kGraphs = 200;
constexpr int kShards = 4;
// Small graphs: a few rows of a few columns up to a few thousand elements, where a
// persistent grid sized to the GPU rather than to the work would be thousands of idle
// threads per element.
constexpr int64_t kMaxElements = 4096;

fs::path ShardDir(int shard) {
  fs::path p = fs::temp_directory_path() /
               ("stitchctl_random_" + std::to_string(::getpid()) + "_" + std::to_string(shard));
  fs::create_directories(p);
  return p;
}

class StitchctlRandomGraphs : public ::testing::TestWithParam<int> {};

TEST_P(StitchctlRandomGraphs, RunEmulateMatchesInterpreter) {
  const uint64_t base = testing::RandomGraphBaseSeed();
  std::printf("stitchctl random graphs: base seed %llu, shard %d\n",
              static_cast<unsigned long long>(base), GetParam());
  const fs::path dir = ShardDir(GetParam());
  int ran = 0;
  for (int i = GetParam(); i < kGraphs; i += kShards) {
    const uint64_t seed = base + static_cast<uint64_t>(i);
    Graph g = testing::RandomGraphBuilder(seed, kMaxElements).Build();
    ASSERT_TRUE(Verify(g).ok()) << "generator made an invalid graph, seed " << seed;
    const fs::path file = dir / ("graph_" + std::to_string(seed) + ".pb");
    {
      std::ofstream out(file, std::ios::binary);
      ASSERT_TRUE(ToProto(g).SerializeToOstream(&out)) << file;
    }
    testing::Outcome o =
        testing::RunStitchctl("run " + file.string() + " --emulate --random-order --json --seed " +
                              std::to_string(seed % 1000000));
    ASSERT_EQ(o.exit_code, 0) << "seed " << seed << ":\n" << o.out << "\n" << ToText(g);
    nlohmann::json result = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(result.is_object()) << "seed " << seed << ": not JSON:\n" << o.out;
    EXPECT_TRUE(result.value("pass", false)) << "seed " << seed << ":\n" << o.out;
    EXPECT_GE(result.value("kernels", 0), 1) << o.out;
    EXPECT_EQ(result["outputs"].size(), g.outputs.size()) << o.out;
    fs::remove(file);
    ++ran;
  }
  EXPECT_EQ(ran, kGraphs / kShards);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Shards, StitchctlRandomGraphs, ::testing::Range(0, kShards));

}  // namespace
}  // namespace stitch
