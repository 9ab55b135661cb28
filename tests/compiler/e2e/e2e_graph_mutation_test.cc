// Random mutations of valid graphs never crash the verifier or the compiler: every mutant
// is either accepted (and then compiles) or rejected with a message.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>

#include "stitch/driver/compile.h"
#include "stitch/ir/verifier.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

int64_t WildInt(std::mt19937_64& rng) {
  static const int64_t kValues[] = {
      -1, 0, 1, 2, 3, 7, 64, 1000, int64_t{1} << 31, int64_t{1} << 62, INT64_MAX, INT64_MIN};
  return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
}

void Mutate(Graph& g, std::mt19937_64& rng) {
  if (g.nodes.empty()) return;
  Node& n = g.nodes[rng() % g.nodes.size()];
  switch (rng() % 10) {
    case 0:
      n.op = static_cast<OpCode>(rng() % 100);
      break;
    case 1:
      n.shape.dtype = static_cast<DType>(rng() % 14);
      break;
    case 2:
      if (!n.shape.dims.empty()) n.shape.dims[rng() % n.shape.dims.size()] = WildInt(rng);
      break;
    case 3:
      n.shape.dims.push_back(WildInt(rng));
      break;
    case 4:
      if (!n.operands.empty()) {
        n.operands[rng() % n.operands.size()] = static_cast<int>(rng() % (g.nodes.size() + 3)) - 1;
      }
      break;
    case 5:
      n.operands.push_back(static_cast<int>(rng() % g.nodes.size()));
      break;
    case 6:
      n.dimensions.push_back(WildInt(rng));
      break;
    case 7:
      if (!n.dimensions.empty()) n.dimensions[rng() % n.dimensions.size()] = WildInt(rng);
      break;
    case 8:
      g.outputs.push_back(static_cast<int>(rng() % (g.nodes.size() + 2)));
      break;
    default:
      n.parameter_number = WildInt(rng);
      break;
  }
}

TEST(GraphMutation, NeverCrashesVerifierOrCompiler) {
  // STITCH_TEST_SEED replays a run; the seed is flushed before anything can crash.
  const char* replay = std::getenv("STITCH_TEST_SEED");
  const uint64_t seed =
      replay != nullptr && *replay != '\0'
          ? std::strtoull(replay, nullptr, 10)
          : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::printf("graph mutation: seed %llu\n", static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 300; ++i) {
    Graph g = testing::RandomGraphBuilder(seed + i).Build();
    int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) Mutate(g, rng);
    Status s = Verify(g);
    if (!s.ok()) {
      EXPECT_FALSE(s.message().empty());
      ++rejected;
      continue;
    }
    ++accepted;
    CompileOptions options;
    options.codegen.emit_cubin = false;
    StatusOr<CompileResult> r = CompileGraph(g, options);
    EXPECT_TRUE(r.ok() || !r.status().message().empty());
  }
  std::printf("graph mutation: %d accepted, %d rejected\n", accepted, rejected);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace stitch
