// The memory-intensive subgraphs of a real model (PyTorch/XLA MobileNetV2 training step)
// each compile to PTX and cubin, and run on the emulator at scaled shapes, matching the
// interpreter.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "stitch/driver/compile.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/reference/shape_scaling.h"
#include "support/emulator_check.h"

namespace stitch {
namespace {

constexpr int kShards = 8;

const std::vector<Graph>& MobilenetSubgraphs() {
  static const std::vector<Graph> graphs = [] {
    std::ifstream in(std::string(STITCH_CORPUS_DIR) +
                     "/hlo/real_models/mobilenet_v2_pytorchxla_train_bs96.hlo");
    std::stringstream text;
    text << in.rdbuf();
    HloImportOptions options;
    options.source_name = "mobilenet_v2_pytorchxla_train_bs96.hlo";
    StatusOr<std::vector<Graph>> g = ExtractMemoryIntensiveSubgraphs(text.str(), options);
    return g.ok() ? std::move(g).value() : std::vector<Graph>{};
  }();
  return graphs;
}

TEST(ExtractedModel, MobilenetHasManySubgraphs) { EXPECT_GT(MobilenetSubgraphs().size(), 100u); }

class ExtractedSubgraphs : public ::testing::TestWithParam<int> {};

TEST_P(ExtractedSubgraphs, CompileAndMatchOnEmulator) {
  const auto& graphs = MobilenetSubgraphs();
  ASSERT_FALSE(graphs.empty());
  for (size_t i = GetParam(); i < graphs.size(); i += kShards) {
    const Graph& g = graphs[i];
    SCOPED_TRACE(g.name);
    CompileOptions options;
    StatusOr<CompileResult> r = CompileGraph(g, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const CompiledKernel& k : r->kernels) {
      EXPECT_FALSE(k.ptx.empty());
      if (CubinAvailable(options.codegen)) {
        EXPECT_FALSE(k.cubin.empty());
      }
    }
    std::optional<ScaledGraph> scaled = ScaleForEmulation(g, int64_t{1} << 16);
    ASSERT_TRUE(scaled.has_value()) << "no emulation shape";
    EXPECT_TRUE(testing::CheckOnEmulator(scaled->graph, 7 + i, /*random_order=*/true));
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, ExtractedSubgraphs, ::testing::Range(0, kShards));

}  // namespace
}  // namespace stitch
