// The Extract RPC of a real stitchd process through the real client library: the daemon's
// extraction equals the library's, malformed text names its line, and every answer is counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "support/command.h"
#include "support/daemon_client.h"
#include "support/daemon_requests.h"
#include "support/stitchd_process.h"

namespace stitch::testing {
namespace {

using client::Client;
using client::ClientOptions;
using client::Outcome;
using std::chrono::milliseconds;

std::string CorpusFile(const std::string& relative) {
  return ReadFile(std::string(STITCH_CORPUS_DIR) + "/" + relative);
}

// What the daemon answers for `text`, computed in this process with the daemon's options.
std::vector<v1::Graph> LibraryExtraction(const std::string& text) {
  HloImportOptions o;
  o.source_name = "request";
  StatusOr<std::vector<Graph>> graphs = ExtractMemoryIntensiveSubgraphs(text, o);
  EXPECT_TRUE(graphs.ok()) << graphs.status().ToString();
  std::vector<v1::Graph> out;
  if (graphs.ok()) {
    for (const Graph& g : *graphs) out.push_back(ToProto(g));
  }
  return out;
}

class StitchdExtractTest : public ::testing::Test {
 protected:
  DaemonPaths Paths() const { return dir_.Daemon(); }

  TempDir dir_;
};

TEST_F(StitchdExtractTest, CorpusModelGivesTheLibrarysGraphsInOrder) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  const std::string text = CorpusFile("hlo/real_models/mobilenet_v2_pytorchxla_train_bs96.hlo");

  StatusOr<std::vector<v1::Graph>> graphs = c.Extract(text);
  ASSERT_TRUE(graphs.ok()) << graphs.status().ToString();
  const std::vector<v1::Graph> expected = LibraryExtraction(text);
  ASSERT_GT(expected.size(), 100u) << "a MobileNetV2 training step has ~150 subgraphs";
  ASSERT_EQ(graphs->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ((*graphs)[i].name(), expected[i].name());
    EXPECT_EQ((*graphs)[i].SerializeAsString(), expected[i].SerializeAsString())
        << "graph " << i << " (" << expected[i].name() << ") differs";
  }
}

TEST_F(StitchdExtractTest, SeveralModulesComeInTextOrderAndTheirGraphsCompile) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  const std::string first = CorpusFile("hlo/extracted/layernorm_fwd_2d1_f32.hlo");
  const std::string second = CorpusFile("hlo/extracted/batchnorm_training_op.hlo");
  const std::string text = first + "\n// -----\n" + second;

  StatusOr<std::vector<v1::Graph>> graphs = c.Extract(text);
  ASSERT_TRUE(graphs.ok()) << graphs.status().ToString();
  const std::vector<v1::Graph> expected = LibraryExtraction(text);
  ASSERT_EQ(graphs->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ((*graphs)[i].SerializeAsString(), expected[i].SerializeAsString()) << i;
  }
  // The first module's subgraphs, then the second's: the same graphs as extracting each
  // alone, the names aside (numbering runs on across the text, so names stay unique).
  std::vector<v1::Graph> alone = LibraryExtraction(first);
  const size_t first_count = alone.size();
  const std::vector<v1::Graph> of_second = LibraryExtraction(second);
  ASSERT_GT(first_count, 0u);
  ASSERT_FALSE(of_second.empty());
  alone.insert(alone.end(), of_second.begin(), of_second.end());
  ASSERT_EQ(graphs->size(), alone.size());
  std::vector<std::string> names;
  for (size_t i = 0; i < alone.size(); ++i) {
    v1::Graph got = (*graphs)[i];
    names.push_back(got.name());
    got.clear_name();
    alone[i].clear_name();
    EXPECT_EQ(got.SerializeAsString(), alone[i].SerializeAsString())
        << "graph " << i << " is not the " << (i < first_count ? "first" : "second") << " module's";
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end()) << "names are unique";

  // An extracted signature is what Compile takes: the smallest one compiles.
  const v1::Graph& smallest = *std::min_element(
      graphs->begin(), graphs->end(),
      [](const v1::Graph& a, const v1::Graph& b) { return a.nodes_size() < b.nodes_size(); });
  v1::CompileRequest request;
  *request.mutable_graph() = smallest;
  client::Result r = c.Compile(request);
  EXPECT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
}

// A job whose batch varies names it at extraction: its signatures carry outer parameters,
// and every batch size of a bucket compiles once, while fixed shapes key per size.
TEST_F(StitchdExtractTest, AnOuterExtentNamesABucketThatEveryBatchOfItShares) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  std::vector<std::string> bucket_keys, exact_keys;
  for (int64_t rows : {40, 50, 64}) {
    StatusOr<std::vector<v1::Graph>> graphs =
        c.Extract(SoftmaxHlo(static_cast<int>(rows), 64), rows);
    ASSERT_TRUE(graphs.ok()) << graphs.status().ToString();
    ASSERT_EQ(graphs->size(), 1u);
    ASSERT_EQ((*graphs)[0].outer_parameters_size(), 1);
    EXPECT_EQ((*graphs)[0].outer_parameters(0), 0);
    v1::CompileRequest request;
    *request.mutable_graph() = (*graphs)[0];
    client::Result r = c.Compile(request);
    ASSERT_TRUE(r.ok()) << r.reason;
    if (rows == 40) {
      EXPECT_EQ(r.outcome, Outcome::kCompiled);
    } else {
      EXPECT_EQ(r.outcome, Outcome::kMemory) << rows << ": the bucket's bundle, not a compile";
    }
    EXPECT_EQ(r.bundle->outer_extent().lo(), 33);
    EXPECT_EQ(r.bundle->outer_extent().hi(), 64);
    bucket_keys.push_back(r.key);

    StatusOr<std::vector<v1::Graph>> fixed = c.Extract(SoftmaxHlo(static_cast<int>(rows), 64));
    ASSERT_TRUE(fixed.ok()) << fixed.status().ToString();
    ASSERT_EQ(fixed->size(), 1u);
    EXPECT_EQ((*fixed)[0].outer_parameters_size(), 0);
    *request.mutable_graph() = (*fixed)[0];
    r = c.Compile(request);
    ASSERT_TRUE(r.ok()) << r.reason;
    EXPECT_FALSE(r.bundle->has_outer_extent());
    exact_keys.push_back(r.key);
  }
  EXPECT_EQ(bucket_keys[0], bucket_keys[1]);
  EXPECT_EQ(bucket_keys[1], bucket_keys[2]);
  EXPECT_NE(exact_keys[0], exact_keys[1]);
  EXPECT_NE(exact_keys[0], bucket_keys[0]);

  StatusOr<std::vector<v1::Graph>> negative = c.Extract(SoftmaxHlo(40, 64), -3);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("outer_extent is -3"), std::string::npos)
      << negative.status().ToString();
}

TEST_F(StitchdExtractTest, MalformedTextIsInvalidArgumentNamingTheLineAndIsCounted) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));

  StatusOr<std::vector<v1::Graph>> bad = c.Extract(
      "HloModule broken\n"
      "ENTRY e {\n"
      "  a = f32[4] parameter(0)\n"
      "  ROOT b = f32[4] add(a, missing)\n"
      "}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("request:4"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("missing"), std::string::npos) << bad.status().ToString();

  StatusOr<std::vector<v1::Graph>> not_hlo = c.Extract("this is not HLO");
  ASSERT_FALSE(not_hlo.ok());
  EXPECT_EQ(not_hlo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_hlo.status().message().find("request:1"), std::string::npos)
      << not_hlo.status().ToString();

  // A module of matrix multiplies only has no memory-intensive subgraph.
  StatusOr<std::vector<v1::Graph>> none = c.Extract(
      "HloModule only_dot\n"
      "ENTRY e {\n"
      "  a = f32[4,8] parameter(0)\n"
      "  b = f32[8,4] parameter(1)\n"
      "  ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "}\n");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());

  // Still serving, and the metrics count each answer under the Extract method.
  EXPECT_TRUE(d.alive());
  int status = 0;
  const std::string body = RunCommand(
      "curl -sS http://127.0.0.1:" + std::to_string(d.metrics_port()) + "/metrics", &status);
  ASSERT_EQ(status, 0) << "curl failed; run scripts/setup";
  EXPECT_NE(
      body.find("stitch_requests_total{method=\"Extract\",result=\"error\",shape=\"exact\"} 2"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("stitch_requests_total{method=\"Extract\",result=\"ok\",shape=\"exact\"} 1"),
            std::string::npos)
      << body;
}

TEST_F(StitchdExtractTest, FullQueueAnswersResourceExhausted) {
  StitchdProcess d(Paths(), {"--workers", "1", "--max-queue", "1"});
  ASSERT_TRUE(d.started()) << d.log();
  // A long compile holds the only worker; extractions then queue behind it, one at most.
  client::Result compiled;
  std::thread compile([&] {
    Client c(PatientClientOptions(d));
    compiled = c.Compile(LongChainRequest(150, 1024));
  });
  Client watcher(PatientClientOptions(d));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    StatusOr<v1::StatsResponse> s = watcher.Stats();
    if (s.ok() && s->compiles_in_flight() == 1) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  const std::string text = CorpusFile("hlo/extracted/layernorm_fwd_2d1_f32.hlo");
  constexpr int kRequests = 4;
  std::vector<StatusOr<std::vector<v1::Graph>>> results(
      kRequests, StatusOr<std::vector<v1::Graph>>(Internal("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      Client c(PatientClientOptions(d));
      results[static_cast<size_t>(i)] = c.Extract(text);
    });
  }
  for (std::thread& t : threads) t.join();
  compile.join();
  EXPECT_TRUE(compiled.ok()) << compiled.reason;
  int ok = 0, exhausted = 0;
  for (const StatusOr<std::vector<v1::Graph>>& r : results) {
    ok += r.ok();
    exhausted += !r.ok() && r.status().code() == StatusCode::kResourceExhausted;
  }
  EXPECT_GE(ok, 1) << "the queued extraction runs after the compile";
  EXPECT_GE(exhausted, 1);
  EXPECT_EQ(ok + exhausted, kRequests);
}

}  // namespace
}  // namespace stitch::testing
