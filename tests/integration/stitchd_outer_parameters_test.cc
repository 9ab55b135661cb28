// CompileRequest.outer_parameters against a real stitchd process: HLO text that names the
// parameters whose dimension 0 varies is keyed and compiled once per bucket of that extent,
// and outer parameters the daemon cannot take are INVALID_ARGUMENT naming them.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "stitch/client/client.h"
#include "support/daemon_client.h"
#include "support/daemon_requests.h"
#include "support/stitchd_process.h"

namespace stitch::testing {
namespace {

using client::Client;
using client::Outcome;

// An extent of the bucket (32, 64] other than 40 and 50, drawn from a logged seed
// (STITCH_TEST_SEED replays one).
int64_t RandomExtentOfTheBucket() {
  const char* replay = std::getenv("STITCH_TEST_SEED");
  const uint64_t seed =
      replay != nullptr ? std::strtoull(replay, nullptr, 10) : std::random_device{}();
  std::printf("outer parameters: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int64_t extent = 40;
  while (extent == 40 || extent == 50) extent = 33 + static_cast<int64_t>(rng() % 32);
  return extent;
}

v1::CompileRequest GenericRequest(int rows, std::vector<int64_t> outer_parameters) {
  v1::CompileRequest r = HloRequest(SoftmaxHlo(rows, 64));
  r.mutable_outer_parameters()->Add(outer_parameters.begin(), outer_parameters.end());
  return r;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

class StitchdOuterParametersTest : public ::testing::Test {
 protected:
  DaemonPaths Paths() const { return dir_.Daemon(); }
  static uint64_t Compiles(Client& c) {
    StatusOr<v1::StatsResponse> s = c.Stats();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? s->compiles() : 0;
  }

  TempDir dir_;
};

TEST_F(StitchdOuterParametersTest, HloTextsOfOneBucketShareOneKeyAndOneCompile) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  std::vector<std::string> keys;
  for (int64_t rows : {int64_t{40}, int64_t{50}, RandomExtentOfTheBucket()}) {
    client::Result r = c.Compile(GenericRequest(static_cast<int>(rows), {0}));
    ASSERT_TRUE(r.ok()) << rows << ": " << r.reason;
    EXPECT_EQ(r.outcome, keys.empty() ? Outcome::kCompiled : Outcome::kMemory)
        << rows << " rows: the bucket's bundle, not a compile of its own";
    ASSERT_TRUE(r.bundle->has_outer_extent()) << rows;
    EXPECT_EQ(r.bundle->outer_extent().lo(), 33);
    EXPECT_EQ(r.bundle->outer_extent().hi(), 64);
    ASSERT_EQ(r.bundle->outer_extent().parameters_size(), 1);
    EXPECT_EQ(r.bundle->outer_extent().parameters(0), 0);
    for (const v1::Kernel& k : r.bundle->kernels()) EXPECT_TRUE(k.takes_outer_extent()) << k.name();
    keys.push_back(r.key);
  }
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(keys[1], keys[2]);
  EXPECT_EQ(Compiles(c), 1u);

  // A lookup at another extent of the bucket finds it; the next bucket is another key.
  client::Result found = c.Lookup(GenericRequest(64, {0}));
  EXPECT_EQ(found.outcome, Outcome::kMemory) << found.reason;
  EXPECT_EQ(found.key, keys[0]);
  client::Result next = c.Lookup(GenericRequest(65, {0}));
  EXPECT_FALSE(next.ok());
  EXPECT_TRUE(StartsWith(next.reason, "NOT_FOUND")) << next.reason;

  // Without outer parameters the same text is its exact shapes: a key and a compile of its own.
  client::Result exact = c.Compile(HloRequest(SoftmaxHlo(40, 64)));
  ASSERT_TRUE(exact.ok()) << exact.reason;
  EXPECT_EQ(exact.outcome, Outcome::kCompiled);
  EXPECT_FALSE(exact.bundle->has_outer_extent());
  EXPECT_NE(exact.key, keys[0]);
  EXPECT_EQ(Compiles(c), 2u);
}

TEST_F(StitchdOuterParametersTest, OuterParametersTheDaemonCannotTakeAreInvalidArgument) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));

  client::Result out_of_range = c.Compile(GenericRequest(40, {3}));
  EXPECT_FALSE(out_of_range.ok());
  EXPECT_TRUE(StartsWith(out_of_range.reason, "INVALID_ARGUMENT")) << out_of_range.reason;
  EXPECT_NE(out_of_range.reason.find("outer parameter 3"), std::string::npos)
      << out_of_range.reason;

  client::Result twice = c.Lookup(GenericRequest(40, {0, 0}));
  EXPECT_TRUE(StartsWith(twice.reason, "INVALID_ARGUMENT")) << twice.reason;
  EXPECT_NE(twice.reason.find("named twice"), std::string::npos) << twice.reason;

  // A graph carries its own outer parameters: a second list beside it is refused.
  v1::CompileRequest graph_request = LongChainRequest(4, 64);
  graph_request.add_outer_parameters(0);
  client::Result with_graph = c.Compile(graph_request);
  EXPECT_FALSE(with_graph.ok());
  EXPECT_TRUE(StartsWith(with_graph.reason, "INVALID_ARGUMENT")) << with_graph.reason;
  EXPECT_NE(with_graph.reason.find("Graph.outer_parameters"), std::string::npos)
      << with_graph.reason;
  EXPECT_EQ(Compiles(c), 0u);
}

}  // namespace
}  // namespace stitch::testing
