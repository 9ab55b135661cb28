// Moving a node's cache between real stitchd processes with `stitchctl cache export` and
// `stitchctl cache import`, and filling one ahead of a job with `stitchctl warm`.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stitch/client/client.h"
#include "support/command.h"
#include "support/daemon_client.h"
#include "support/stitchd_process.h"

namespace stitch::testing {
namespace {

namespace fs = std::filesystem;

using client::Client;
using client::ClientOptions;
using std::chrono::milliseconds;

const std::vector<std::string> kGraphs = {"hlo/extracted/layernorm_fwd_2d1_f32.hlo",
                                          "hlo/xla_emit_reduce_row_epilogue.hlo"};

// Six memory-intensive subgraphs: enough to show progress, quick to compile.
const std::string kModel =
    std::string(STITCH_CORPUS_DIR) + "/hlo/tf_gpu_tests_row_broadcast_variants.hlo";

v1::CompileRequest CorpusRequest(const std::string& relative) {
  v1::CompileRequest r;
  r.set_hlo_text(ReadFile(std::string(STITCH_CORPUS_DIR) + "/" + relative));
  return r;
}

std::string Stitchctl() { return std::string(STITCH_BINARY_DIR) + "/client/stitchctl"; }

// Runs stitchctl with stdout and stderr together.
Outcome RunCtl(const std::string& args) { return RunStitchctl(args); }

class CacheTransferTest : public ::testing::Test {
 protected:
  DaemonPaths Node(const std::string& name) const { return dir_.Daemon(name); }
  static uint64_t Compiles(Client& c) {
    StatusOr<v1::StatsResponse> s = c.Stats();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? s->compiles() : 0;
  }

  TempDir dir_;
};

TEST_F(CacheTransferTest, ExportedEntriesHitFromDiskOnAnotherNodeByteForByte) {
  const DaemonPaths a = Node("a");
  const std::string live = dir_.path() + "/live.stka";
  const std::string stopped = dir_.path() + "/stopped.stka";
  std::vector<std::string> keys, bundles;
  {
    StitchdProcess d(a);
    ASSERT_TRUE(d.started()) << d.log();
    Client c(PatientClientOptions(d));
    for (const std::string& g : kGraphs) {
      client::Result r = c.Compile(CorpusRequest(g));
      ASSERT_EQ(r.outcome, client::Outcome::kCompiled) << g << ": " << r.reason;
      keys.push_back(r.key);
      bundles.push_back(r.bundle->SerializeAsString());
    }
    Outcome o = RunCtl("cache export " + live + " --daemon " + a.socket);
    ASSERT_EQ(o.exit_code, 0) << o.out;
    EXPECT_NE(o.out.find("exported 2 entries"), std::string::npos) << o.out;

    // The data dir of a running daemon is not read behind its back.
    o = RunCtl("cache export " + stopped + " --data-dir " + a.data_dir);
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("stop the daemon"), std::string::npos) << o.out;
    EXPECT_FALSE(fs::exists(stopped));
    ASSERT_EQ(d.Stop(), 0) << d.log();
  }
  Outcome o = RunCtl("cache export " + stopped + " --data-dir " + a.data_dir);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("exported 2 entries"), std::string::npos) << o.out;

  for (const auto& [node, archive] : {std::pair{"b", live}, std::pair{"c", stopped}}) {
    SCOPED_TRACE(archive);
    const DaemonPaths n = Node(node);
    o = RunCtl("cache import " + archive + " --data-dir " + n.data_dir);
    ASSERT_EQ(o.exit_code, 0) << o.out;
    EXPECT_NE(o.out.find("imported 2 entries"), std::string::npos) << o.out;
    StitchdProcess d(n);
    ASSERT_TRUE(d.started()) << d.log();
    Client c(PatientClientOptions(d));
    for (size_t i = 0; i < kGraphs.size(); ++i) {
      client::Result r = c.Lookup(CorpusRequest(kGraphs[i]));
      ASSERT_EQ(r.outcome, client::Outcome::kDisk) << kGraphs[i] << ": " << r.reason;
      EXPECT_EQ(r.key, keys[i]);
      EXPECT_EQ(r.bundle->SerializeAsString(), bundles[i]) << kGraphs[i];
    }
    EXPECT_EQ(Compiles(c), 0u);

    // Importing into a running daemon's data dir is refused.
    o = RunCtl("cache import " + archive + " --data-dir " + n.data_dir);
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("stop the daemon"), std::string::npos) << o.out;
  }
}

TEST_F(CacheTransferTest, TamperedArchiveIsRefusedNamingTheEntryAndImportsNothing) {
  const DaemonPaths a = Node("a");
  const std::string archive = dir_.path() + "/cache.stka";
  {
    StitchdProcess d(a);
    ASSERT_TRUE(d.started()) << d.log();
    Client c(PatientClientOptions(d));
    for (const std::string& g : kGraphs) ASSERT_TRUE(c.Compile(CorpusRequest(g)).ok()) << g;
    Outcome o = RunCtl("cache export " + archive + " --daemon " + a.socket);
    ASSERT_EQ(o.exit_code, 0) << o.out;
  }
  // The last payload byte of the last entry sits just before the 9-byte trailer.
  std::string bytes = ReadFile(archive);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() - 10] ^= 0x01;
  {
    std::ofstream out(archive, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  const DaemonPaths b = Node("b");
  Outcome o = RunCtl("cache import " + archive + " --data-dir " + b.data_dir);
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_EQ(o.out.rfind("stitchctl: ", 0), 0u) << o.out;
  EXPECT_NE(o.out.find("entry 1 (key "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("SHA-256"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("nothing was imported"), std::string::npos) << o.out;
  EXPECT_FALSE(fs::exists(b.data_dir)) << "the refused import touched the data dir";

  StitchdProcess d(b);
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  StatusOr<v1::StatsResponse> stats = c.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->entries(), 0u);
}

TEST_F(CacheTransferTest, ExportNeedsExactlyOneSource) {
  const std::string archive = dir_.path() + "/x.stka";
  for (const std::string& args :
       {"cache export " + archive,
        "cache export " + archive + " --data-dir " + dir_.path() + " --daemon /nobody.sock"}) {
    Outcome o = RunCtl(args);
    EXPECT_NE(o.exit_code, 0) << args << "\n" << o.out;
    EXPECT_FALSE(fs::exists(archive));
  }
  Outcome o = RunCtl("cache export " + archive + " --data-dir " + dir_.path() + "/none");
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_NE(o.out.find("no kernel cache"), std::string::npos) << o.out;
}

TEST_F(CacheTransferTest, WarmCompilesEverySubgraphOnceThenFindsThemAllCached) {
  const DaemonPaths n = Node("warm");
  StitchdProcess d(n);
  ASSERT_TRUE(d.started()) << d.log();
  const std::string err = dir_.path() + "/warm.err";
  int status = 0;
  std::string out =
      RunCommand(Stitchctl() + " warm " + kModel + " --daemon " + n.socket + " 2>" + err, &status);
  ASSERT_EQ(status, 0) << out << ReadFile(err);
  EXPECT_NE(out.find("subgraphs       6\n"), std::string::npos) << out;
  EXPECT_NE(out.find("failed          0\n"), std::string::npos) << out;
  // Not a terminal: one progress line per subgraph.
  const std::string progress = ReadFile(err);
  EXPECT_NE(progress.find("[1/6] "), std::string::npos) << progress;
  EXPECT_NE(progress.find("[6/6] "), std::string::npos) << progress;
  EXPECT_EQ(progress.find('\r'), std::string::npos) << progress;

  Client c(PatientClientOptions(d));
  const uint64_t compiles = Compiles(c);
  EXPECT_GE(compiles, 1u);

  out = RunCommand(
      Stitchctl() + " warm " + kModel + " --json --daemon unix://" + n.socket + " 2>/dev/null",
      &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["subgraphs"], 6);
  EXPECT_EQ(j["compiled"], 0);
  EXPECT_EQ(j["cached"]["memory"].get<int>() + j["cached"]["disk"].get<int>() +
                j["cached"]["other"].get<int>(),
            6)
      << out;
  EXPECT_TRUE(j["failed"].empty()) << out;
  EXPECT_EQ(Compiles(c), compiles);
}

TEST_F(CacheTransferTest, WarmAgainstNoDaemonFailsEverySubgraphWithItsReason) {
  Outcome o = RunCtl("warm " + kModel + " --timeout 10 --daemon " + dir_.path() + "/nobody.sock");
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_NE(o.out.find("failed          6\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  005 "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("UNAVAILABLE"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace stitch::testing
