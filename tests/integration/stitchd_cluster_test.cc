// The cluster tier end to end: a real 3-master, 3-replica Redis Cluster and real stitchd
// processes, each with its own data dir and socket, all on loopback. Every request a job
// makes must get kernels (compiled, or from a cache tier); faults of the cluster may cost
// compiles, never a failed request.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "support/cold_start.h"
#include "support/daemon_requests.h"
#include "support/redis_cluster.h"
#include "support/stitchd_process.h"

namespace stitch::testing {
namespace {

using client::Client;
using client::ClientOptions;
using client::Outcome;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr const char* kSecret = "integration-test-cluster-secret-0123";

// Lease calls a node made: its first means it took (or asked for) a lease.
constexpr const char* kLeaseCalls =
    "stitch_cluster_call_duration_seconds_count{operation=\"lease\"}";

// Waits until `d` reports `series` at 1 or more, or `end` passes.
void WaitForMetric(const StitchdProcess& d, const std::string& series,
                   steady_clock::time_point end) {
  while (ScrapeMetric(d, series) < 1 && steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(10));
  }
}

class StitchdClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new RedisCluster();
    files_ = new TempDir();
    std::ofstream(files_->path() + "/secret") << kSecret << "\n";
    std::ofstream(files_->path() + "/password") << kRedisUserPassword << "\n";
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete files_;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_->ready()) << "the Redis cluster did not form";
    ASSERT_TRUE(cluster_->WaitHealthy(std::chrono::seconds(30), /*with_replicas=*/false));
    for (int m : cluster_->Masters()) cluster_->Cli(m, "FLUSHALL");
  }

  // The flags that put a daemon on the cluster tier. Short lease and breaker times keep the
  // fault tests short; the deadlines are generous for the loaded 2-core test machine, where
  // a timed-out read or write would cost a compile and break the one-compile-per-key count.
  static std::vector<std::string> ClusterFlags(const std::string& node) {
    return {"--cluster-nodes",
            cluster_->Seeds(),
            "--cluster-user",
            kRedisUser,
            "--cluster-password-file",
            files_->path() + "/password",
            "--cluster-secret-file",
            files_->path() + "/secret",
            "--node-name",
            node,
            "--cluster-read-timeout-ms",
            "2000",
            "--cluster-write-timeout-ms",
            "2000",
            "--cluster-lease-ms",
            "3000",
            "--cluster-breaker-open-ms",
            "500"};
  }
  DaemonPaths Paths(const std::string& node) const {
    const std::string base = dir_.path() + "/" + node;
    return {base + "-data", base + ".sock", base + ".log"};
  }
  std::unique_ptr<StitchdProcess> StartNode(const std::string& node, bool with_cluster = true) {
    auto d = std::make_unique<StitchdProcess>(
        Paths(node), with_cluster ? ClusterFlags(node) : std::vector<std::string>{});
    EXPECT_TRUE(d->started()) << d->log();
    return d;
  }
  static ClientOptions Options(const StitchdProcess& d) {
    ClientOptions o;
    o.address = d.address();
    o.local_cache_entries = 0;
    o.lookup_deadline = milliseconds(10000);
    o.compile_deadline = milliseconds(180000);
    o.admin_deadline = milliseconds(10000);
    return o;
  }
  static v1::StatsResponse StatsOf(const StitchdProcess& d) {
    Client c(Options(d));
    StatusOr<v1::StatsResponse> s = c.Stats();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::StatsResponse();
  }

  // Asks `d` for every request from one job; returns how many came back without kernels and
  // counts the outcomes.
  int AskAll(const StitchdProcess& d, const std::vector<v1::CompileRequest>& requests,
             std::map<Outcome, int>* outcomes) {
    Client c(Options(d));
    int failed = 0;
    for (const auto& r : requests) {
      client::Result got = c.Compile(r);
      if (!got.ok()) {
        ++failed;
        ADD_FAILURE() << got.reason;
      }
      if (outcomes != nullptr) ++(*outcomes)[got.outcome];
    }
    return failed;
  }

  static RedisCluster* cluster_;
  static TempDir* files_;
  TempDir dir_;
};
RedisCluster* StitchdClusterTest::cluster_ = nullptr;
TempDir* StitchdClusterTest::files_ = nullptr;

TEST_F(StitchdClusterTest, OneNodeCompilesTheOthersHitTheClusterThenTheirDisk) {
  std::vector<v1::CompileRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(HloRequest(SoftmaxHlo(32 + i, 256)));
  std::map<std::string, std::string> digests;
  {
    auto a = StartNode("a");
    Client c(Options(*a));
    for (const auto& r : requests) {
      client::Result got = c.Compile(r);
      ASSERT_EQ(got.outcome, Outcome::kCompiled) << got.reason << "\n" << a->log();
      digests[got.key] = got.bundle->digest();
    }
    EXPECT_EQ(ScrapeMetric(*a, "stitch_cluster_writes_total"), 4);
  }
  {
    auto b = StartNode("b");
    Client c(Options(*b));
    for (const auto& r : requests) {
      client::Result got = c.Compile(r);
      ASSERT_EQ(got.outcome, Outcome::kCluster) << got.reason;
      EXPECT_EQ(got.bundle->digest(), digests[got.key]);
    }
    const v1::StatsResponse s = StatsOf(*b);
    EXPECT_EQ(s.compiles(), 0u);
    EXPECT_EQ(s.hits_cluster(), 4u);
    EXPECT_EQ(s.entries(), 4u) << "cluster hits are back-filled into the node's disk";
    EXPECT_EQ(b->Stop(), 0) << b->log();
  }
  // Restarted, node b serves them from its own disk, even with the cluster flushed.
  for (int m : cluster_->Masters()) cluster_->Cli(m, "FLUSHALL");
  auto b = StartNode("b");
  Client c(Options(*b));
  for (const auto& r : requests) {
    client::Result got = c.Compile(r);
    EXPECT_EQ(got.outcome, Outcome::kDisk) << got.reason;
  }
  EXPECT_EQ(StatsOf(*b).compiles(), 0u);
}

TEST_F(StitchdClusterTest, AColdClusterCompilesEachKeyOnceAcrossThreeNodes) {
  const std::vector<v1::CompileRequest> requests = MobileNetRequests();
  ASSERT_FALSE(requests.empty());
  ColdStartResult shared, alone;
  {
    std::vector<std::unique_ptr<StitchdProcess>> nodes;
    for (const char* n : {"a", "b", "c"}) nodes.push_back(StartNode(n));
    shared = ColdStart({nodes[0].get(), nodes[1].get(), nodes[2].get()}, requests, 4);
    // Every node now holds every kernel.
    for (const auto& node : nodes) {
      std::map<Outcome, int> outcomes;
      EXPECT_EQ(AskAll(*node, requests, &outcomes), 0);
      EXPECT_EQ(outcomes[Outcome::kCompiled], 0);
    }
  }
  EXPECT_TRUE(shared.failures.empty()) << shared.failures.front();
  EXPECT_EQ(shared.compiles, shared.keys.size()) << "one compile per key for the whole cluster";
  {
    std::vector<std::unique_ptr<StitchdProcess>> nodes;
    for (const char* n : {"d", "e", "f"}) nodes.push_back(StartNode(n, /*with_cluster=*/false));
    alone = ColdStart({nodes[0].get(), nodes[1].get(), nodes[2].get()}, requests, 4);
  }
  EXPECT_TRUE(alone.failures.empty()) << alone.failures.front();
  EXPECT_EQ(alone.keys, shared.keys);
  EXPECT_EQ(alone.compiles, 3 * shared.keys.size()) << "without the tier each node compiles all";
  std::printf(
      "cold start of %zu subgraphs (%zu keys) on 3 nodes x 4 jobs: %llu compiles in "
      "%.1f s with the cluster tier, %llu compiles in %.1f s without\n",
      requests.size(), shared.keys.size(), static_cast<unsigned long long>(shared.compiles),
      shared.seconds, static_cast<unsigned long long>(alone.compiles), alone.seconds);
}

TEST_F(StitchdClusterTest, KillingARedisMasterFailsNoRequest) {
  std::vector<v1::CompileRequest> requests;
  for (int i = 0; i < 24; ++i) requests.push_back(HloRequest(SoftmaxHlo(40 + i, 128)));
  auto a = StartNode("a");
  ASSERT_EQ(AskAll(*a, requests, nullptr), 0);
  for (int m : cluster_->Masters()) cluster_->Cli(m, "WAIT 1 2000");
  const std::vector<int> masters = cluster_->Masters();
  ASSERT_FALSE(masters.empty());
  const int victim = masters.front();
  // A node with an empty disk reads everything from the cluster while one master dies.
  auto b = StartNode("b");
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    cluster_->Kill(victim);
    killed = true;
  });
  std::map<Outcome, int> during;
  EXPECT_EQ(AskAll(*b, requests, &during), 0);
  killer.join();
  ASSERT_TRUE(killed);
  ASSERT_TRUE(cluster_->WaitHealthy(std::chrono::seconds(30), /*with_replicas=*/false))
      << "the replica did not take over";
  // After the failover a third node finds every entry again, through the promoted replica.
  auto c = StartNode("c");
  std::map<Outcome, int> after;
  const auto end = steady_clock::now() + std::chrono::seconds(20);
  do {
    after.clear();
    std::this_thread::sleep_for(milliseconds(600));  // past the breaker's open period
    c->Stop();
    std::filesystem::remove_all(Paths("c").data_dir);
    c = StartNode("c");
    EXPECT_EQ(AskAll(*c, requests, &after), 0);
  } while (after[Outcome::kCluster] < static_cast<int>(requests.size()) &&
           steady_clock::now() < end);
  EXPECT_EQ(after[Outcome::kCluster], static_cast<int>(requests.size()));
  cluster_->Restart(victim);
}

TEST_F(StitchdClusterTest, AStoppedClusterCostsCompilesNotRequests) {
  auto a = StartNode("a");
  const v1::CompileRequest before = HloRequest(SoftmaxHlo(70, 64));
  ASSERT_EQ(AskAll(*a, {before}, nullptr), 0);
  for (int i = 0; i < RedisCluster::kNodes; ++i) cluster_->Kill(i);
  // Local hits, and compiles of new keys, go on without the cluster.
  std::map<Outcome, int> outcomes;
  std::vector<v1::CompileRequest> during;
  for (int i = 0; i < 10; ++i) during.push_back(HloRequest(SoftmaxHlo(80 + i, 64)));
  EXPECT_EQ(AskAll(*a, during, &outcomes), 0);
  EXPECT_EQ(outcomes[Outcome::kCompiled], 10);
  EXPECT_EQ(AskAll(*a, {before}, &outcomes), 0);
  EXPECT_EQ(outcomes[Outcome::kMemory], 1);
  EXPECT_GE(ScrapeMetric(*a, "stitch_cluster_breaker_trips_total"), 1);
  EXPECT_GT(ScrapeMetric(*a, "stitch_cluster_skipped_calls_total"), 0);
  for (int i = 0; i < RedisCluster::kNodes; ++i) cluster_->Restart(i);
  ASSERT_TRUE(cluster_->WaitHealthy(std::chrono::seconds(60), /*with_replicas=*/false));
  // The breaker closes again and new compiles are shared once more.
  std::this_thread::sleep_for(milliseconds(600));
  const v1::CompileRequest after = HloRequest(SoftmaxHlo(99, 64));
  int tries = 0;
  while (ScrapeMetric(*a, "stitch_cluster_breaker_state{state=\"closed\"}") != 1 && tries++ < 50) {
    Client(Options(*a)).Lookup(HloRequest(SoftmaxHlo(100 + tries, 64)));
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_EQ(AskAll(*a, {after}, nullptr), 0);
  auto b = StartNode("b");
  std::map<Outcome, int> shared;
  EXPECT_EQ(AskAll(*b, {after}, &shared), 0);
  EXPECT_EQ(shared[Outcome::kCluster], 1);
}

TEST_F(StitchdClusterTest, WhenTheLeaseHolderDiesAnotherNodeCompiles) {
  const v1::CompileRequest slow = LongChainRequest(150, 4096);
  auto a = StartNode("a");
  auto b = StartNode("b");
  std::thread holder([&] { Client(Options(*a)).Compile(slow); });
  // Node a holds the lease once the cluster has it; then b asks and waits on a.
  const auto end = steady_clock::now() + std::chrono::seconds(60);
  WaitForMetric(*a, kLeaseCalls, end);
  client::Result waited;
  std::thread waiter([&] { waited = Client(Options(*b)).Compile(slow); });
  WaitForMetric(*b, "stitch_cluster_lease_waits_total", end);
  ASSERT_EQ(ScrapeMetric(*b, "stitch_cluster_lease_waits_total"), 1) << b->log();
  ::kill(a->pid(), SIGKILL);
  holder.join();
  waiter.join();
  EXPECT_EQ(waited.outcome, Outcome::kCompiled) << waited.reason;
  EXPECT_EQ(ScrapeMetric(*b, "stitch_cluster_lease_takeovers_total"), 1);
  EXPECT_EQ(StatsOf(*b).compiles(), 1u);
}

TEST_F(StitchdClusterTest, AWaitingRequestFallsBackAtItsDeadlineAndTheKernelsStillLand) {
  const v1::CompileRequest slow = LongChainRequest(150, 2048);
  auto a = StartNode("a");
  auto b = StartNode("b");
  std::thread holder([&] { Client(Options(*a)).Compile(slow); });
  const auto end = steady_clock::now() + std::chrono::seconds(60);
  WaitForMetric(*a, kLeaseCalls, end);
  // Node b waits on a's lease; its job's deadline is short, so the job falls back. The
  // client connects first: on a loaded machine a channel's connection alone can outlast the
  // deadline, and a request that never reached b is not the case under test.
  Client job(Options(*b));
  ASSERT_TRUE(job.Stats().ok());
  client::Result late = job.Compile(slow, milliseconds(300));
  EXPECT_EQ(late.outcome, Outcome::kFallback);
  EXPECT_NE(late.reason.find("DEADLINE_EXCEEDED"), std::string::npos) << late.reason;
  EXPECT_EQ(ScrapeMetric(*b, "stitch_cluster_lease_waits_total"), 1) << b->log();
  holder.join();
  // b's wait went on without the job and lands a's kernels in b's own tiers (a lookup may
  // find them in the cluster a moment before the wait's next look does).
  const auto in_memory = [&] {
    return Client(Options(*b)).Lookup(slow).outcome == Outcome::kMemory;
  };
  bool landed = false;
  while (!landed && steady_clock::now() < end) {
    landed = in_memory();
    if (!landed) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(landed) << b->log();
  EXPECT_EQ(StatsOf(*b).compiles(), 0u);
  EXPECT_EQ(StatsOf(*a).compiles(), 1u);
}

TEST_F(StitchdClusterTest, ASlowClusterLeavesLocalHitsAlone) {
  auto a = StartNode("a");
  std::vector<v1::CompileRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(HloRequest(SoftmaxHlo(120 + i, 64)));
  ASSERT_EQ(AskAll(*a, requests, nullptr), 0);
  const double calls_before =
      ScrapeMetric(*a, "stitch_cluster_call_duration_seconds_count{operation=\"get\"}");
  const std::vector<int> masters = cluster_->Masters();
  for (int m : masters) cluster_->Pause(m);
  std::map<Outcome, int> outcomes;
  for (int round = 0; round < 5; ++round) EXPECT_EQ(AskAll(*a, requests, &outcomes), 0);
  // A miss during the pause waits out the read deadline at most, then compiles.
  std::map<Outcome, int> fresh;
  EXPECT_EQ(AskAll(*a, {HloRequest(SoftmaxHlo(200, 64))}, &fresh), 0);
  for (int m : masters) cluster_->Resume(m);
  EXPECT_EQ(outcomes[Outcome::kMemory], 40);
  EXPECT_EQ(fresh[Outcome::kCompiled], 1);
  // Memory hits never reached the cluster: only the one miss did.
  EXPECT_LE(ScrapeMetric(*a, "stitch_cluster_call_duration_seconds_count{operation=\"get\"}"),
            calls_before + 2);
}

TEST_F(StitchdClusterTest, EntriesWrittenBehindTheDaemonsBackAreNotServed) {
  auto a = StartNode("a");
  const v1::CompileRequest request = HloRequest(SoftmaxHlo(300, 64));
  client::Result first = Client(Options(*a)).Compile(request);
  ASSERT_EQ(first.outcome, Outcome::kCompiled) << first.reason;
  // The cluster key names the bundle format version (kBundleFormatVersion, cache/entry.h).
  const std::string redis_key = "stitch:v3:{" + first.key + "}";
  // Overwrite the entry with bytes an attacker without the secret could write.
  const std::string file = dir_.path() + "/forged.bin";
  std::ofstream(file, std::ios::binary) << "STC" << '\x01' << std::string(200, 'x');
  int status = -1;
  cluster_->Cli(0, "-c -x SET '" + redis_key + "' < " + file, &status);
  ASSERT_EQ(status, 0);
  auto b = StartNode("b");
  client::Result got = Client(Options(*b)).Compile(request);
  EXPECT_EQ(got.outcome, Outcome::kCompiled) << "a forged entry must not be served";
  // Each read of it is refused: the request's lookup and the compile's last look.
  EXPECT_GE(ScrapeMetric(*b, "stitch_cluster_rejected_entries_total{reason=\"truncated\"}"), 1);
  EXPECT_EQ(ScrapeMetric(*b, "stitch_cluster_rejected_entries_total{reason=\"hmac\"}"), 0);
  // The metrics page with every cluster family still passes promtool.
  const std::string page = dir_.path() + "/metrics.txt";
  RunCommand(
      "curl -sS -o " + page + " http://127.0.0.1:" + std::to_string(b->metrics_port()) + "/metrics",
      &status);
  std::string promtool = RunCommand("promtool check metrics < " + page + " 2>&1", &status);
  EXPECT_EQ(status, 0) << promtool;
  const std::string body = ReadFile(page);
  for (const char* family :
       {"stitch_cluster_call_duration_seconds_bucket",
        "stitch_cluster_errors_total{kind=", "stitch_cluster_breaker_state{state=\"closed\"} 1",
        "stitch_cluster_lease_waits_total", "stitch_cluster_redirects_total{kind=\"moved\"}",
        "stitch_requests_total{method=\"Compile\",result=\"hit_cluster\",shape=\"exact\"}"}) {
    EXPECT_NE(body.find(family), std::string::npos) << family;
  }
}

}  // namespace
}  // namespace stitch::testing
