// End to end on one node: a real stitchd process, the real client library over a Unix
// socket, RocksDB on disk, and the metrics endpoint checked by promtool.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <latch>
#include <map>
#include <random>
#include <thread>
#include <tuple>

#include "stitch/client/client.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/plan/target.h"
#include "stitch/v1/kernel_service.grpc.pb.h"
#include "support/daemon_client.h"
#include "support/daemon_requests.h"
#include "support/stitchd_process.h"

namespace stitch::testing {
namespace {

using client::Client;
using client::ClientOptions;
using client::Outcome;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string CorpusFile(const std::string& relative) {
  return ReadFile(std::string(STITCH_CORPUS_DIR) + "/" + relative);
}

class StitchdTest : public ::testing::Test {
 protected:
  DaemonPaths Paths() const { return dir_.Daemon(); }
  static v1::StatsResponse StatsOf(Client& c) {
    StatusOr<v1::StatsResponse> s = c.Stats();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::StatsResponse();
  }

  TempDir dir_;
};

TEST_F(StitchdTest, CompiledThenMemoryHitThenDiskHitAfterRestart) {
  v1::CompileRequest request = HloRequest(CorpusFile("hlo/extracted/layernorm_fwd_2d1_f32.hlo"));
  std::string key, ptx;
  {
    StitchdProcess d(Paths());
    ASSERT_TRUE(d.started()) << d.log();
    Client c(PatientClientOptions(d));
    client::Result first = c.Compile(request);
    ASSERT_EQ(first.outcome, Outcome::kCompiled) << first.reason;
    ASSERT_EQ(first.key.size(), 64u);
    ASSERT_GT(first.bundle->kernels_size(), 0);
    EXPECT_EQ(first.bundle->key(), first.key);
    EXPECT_FALSE(first.bundle->kernels(0).ptx().empty());
    key = first.key;
    ptx = first.bundle->kernels(0).ptx();

    client::Result second = c.Compile(request);
    ASSERT_EQ(second.outcome, Outcome::kMemory) << second.reason;
    EXPECT_EQ(second.key, key);
    EXPECT_EQ(second.bundle->digest(), first.bundle->digest());
    v1::StatsResponse s = StatsOf(c);
    EXPECT_EQ(s.compiles(), 1u);
    EXPECT_EQ(s.hits_memory(), 1u);
    EXPECT_GT(s.compile_seconds_saved(), 0.0);
    EXPECT_EQ(d.Stop(), 0) << d.log();
  }
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  client::Result third = c.Compile(request);
  ASSERT_EQ(third.outcome, Outcome::kDisk) << third.reason;
  EXPECT_EQ(third.key, key);
  EXPECT_EQ(third.bundle->kernels(0).ptx(), ptx);
  client::Result fourth = c.Lookup(request);
  EXPECT_EQ(fourth.outcome, Outcome::kMemory) << fourth.reason;
  // The fleet totals survive the restart.
  v1::StatsResponse s = StatsOf(c);
  EXPECT_EQ(s.compiles(), 1u);
  EXPECT_EQ(s.hits_disk(), 1u);
}

TEST_F(StitchdTest, ThirtyTwoConcurrentIdenticalRequestsCompileOnce) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  v1::CompileRequest request = HloRequest(SoftmaxHlo(333, 777));
  constexpr int kRequests = 32;
  std::vector<client::Result> results(kRequests);
  std::latch start(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      Client c(PatientClientOptions(d));
      start.arrive_and_wait();
      results[static_cast<size_t>(i)] = c.Compile(request);
    });
  }
  for (std::thread& t : threads) t.join();
  int compiled = 0;
  for (const client::Result& r : results) {
    ASSERT_TRUE(r.ok()) << r.reason;
    EXPECT_EQ(r.key, results[0].key);
    compiled += r.outcome == Outcome::kCompiled;
  }
  EXPECT_GE(compiled, 1);
  Client c(PatientClientOptions(d));
  EXPECT_EQ(StatsOf(c).compiles(), 1u);
}

TEST_F(StitchdTest, SecondDaemonOnTheSameSocketOrDataDirRefusesToStart) {
  StitchdProcess first(Paths());
  ASSERT_TRUE(first.started()) << first.log();

  DaemonPaths same_socket = Paths();
  same_socket.data_dir = dir_.path() + "/data2";
  same_socket.log = dir_.path() + "/second.log";
  StitchdProcess second(same_socket);
  EXPECT_FALSE(second.started());
  EXPECT_EQ(second.Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(second.log().find("holds " + Paths().socket + ".lock"), std::string::npos)
      << second.log();
  EXPECT_NE(second.log().find(std::to_string(first.pid())), std::string::npos) << second.log();

  DaemonPaths same_data = Paths();
  same_data.socket = dir_.path() + "/other.sock";
  same_data.log = dir_.path() + "/third.log";
  StitchdProcess third(same_data);
  EXPECT_FALSE(third.started());
  EXPECT_EQ(third.Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(third.log().find(Paths().data_dir), std::string::npos) << third.log();

  // The first daemon still serves.
  Client c(PatientClientOptions(first));
  EXPECT_TRUE(c.Stats().ok());
  EXPECT_TRUE(first.alive());
}

TEST_F(StitchdTest, ClientOfADeadSocketFallsBackWithinItsDeadline) {
  ClientOptions o;
  o.address = "unix://" + dir_.path() + "/nobody-listens.sock";
  o.lookup_deadline = milliseconds(50);
  Client c(o);
  v1::CompileRequest request = HloRequest(SoftmaxHlo(8, 8));
  for (int i = 0; i < 3; ++i) {
    auto start = steady_clock::now();
    client::Result r = c.Lookup(request);
    auto elapsed = steady_clock::now() - start;
    EXPECT_EQ(r.outcome, Outcome::kFallback);
    EXPECT_FALSE(r.reason.empty());
    EXPECT_LT(elapsed, milliseconds(50 + 1000)) << r.reason;
    start = steady_clock::now();
    r = c.Compile(request, milliseconds(50));
    elapsed = steady_clock::now() - start;
    EXPECT_EQ(r.outcome, Outcome::kFallback);
    EXPECT_LT(elapsed, milliseconds(50 + 1000)) << r.reason;
  }
}

// Calls `method` with the raw request `bytes`, as a broken or foreign client would, and
// returns the status; the response bytes go to `response` when it is given.
grpc::Status CallRaw(const std::string& address, const std::string& method,
                     const std::string& bytes, std::string* response = nullptr) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), reply;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    std::lock_guard lock(mu);
    result = s;
    done = true;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  if (response != nullptr && result.ok()) {
    std::vector<grpc::Slice> slices;
    if (reply.Dump(&slices).ok()) {
      for (const grpc::Slice& sl : slices) {
        response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      }
    }
  }
  return result;
}

TEST_F(StitchdTest, BadInputIsInvalidArgumentAndLeavesTheDaemonServing) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));

  std::mt19937 rng(12345);
  std::string garbage(4096, '\0');
  for (char& ch : garbage) ch = static_cast<char>(rng());
  grpc::Status raw = CallRaw(d.address(), "/stitch.v1.KernelService/Compile", garbage);
  EXPECT_EQ(raw.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << raw.error_message();

  v1::CompileRequest cycle;
  v1::Graph& g = *cycle.mutable_graph();
  for (int i = 0; i < 3; ++i) {
    v1::Node* n = g.add_nodes();
    n->mutable_shape()->set_dtype(v1::F32);
    n->mutable_shape()->add_dims(4);
    if (i == 0) {
      n->set_op(v1::PARAMETER);
    } else {
      n->set_op(v1::NEG);
      n->add_operands(i == 1 ? 2 : 1);
    }
  }
  g.add_outputs(2);
  client::Result r = c.Compile(cycle);
  EXPECT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_EQ(r.reason.rfind("INVALID_ARGUMENT", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find("cycle"), std::string::npos) << r.reason;

  r = c.Compile(LongChainRequest(100000, 4));
  EXPECT_EQ(r.reason.rfind("INVALID_ARGUMENT", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find("over the limit"), std::string::npos) << r.reason;

  r = c.Compile(HloRequest(R"(HloModule has_dot
ENTRY main {
  a = f32[4,8] parameter(0)
  b = f32[8,4] parameter(1)
  ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})"));
  EXPECT_EQ(r.reason.rfind("INVALID_ARGUMENT", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find("dot"), std::string::npos) << r.reason;

  r = c.Compile(HloRequest("this is not HLO"));
  EXPECT_EQ(r.reason.rfind("INVALID_ARGUMENT", 0), 0u) << r.reason;

  v1::CompileRequest empty;
  r = c.Compile(empty);
  EXPECT_EQ(r.reason.rfind("INVALID_ARGUMENT", 0), 0u) << r.reason;

  // Still serving, and nothing was stored for the bad requests.
  EXPECT_TRUE(d.alive());
  client::Result good = c.Compile(HloRequest(SoftmaxHlo(16, 32)));
  EXPECT_EQ(good.outcome, Outcome::kCompiled) << good.reason;
  v1::StatsResponse s = StatsOf(c);
  EXPECT_EQ(s.entries(), 1u);
  EXPECT_GE(s.errors(), 5u);
}

TEST_F(StitchdTest, MetricsEndpointPassesPromtoolAndCountsRequests) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  v1::CompileRequest request = HloRequest(SoftmaxHlo(64, 128));
  ASSERT_TRUE(c.Compile(request).ok());
  ASSERT_TRUE(c.Lookup(request).ok());

  std::string url = "http://127.0.0.1:" + std::to_string(d.metrics_port());
  std::string file = dir_.path() + "/metrics.txt";
  int status = 0;
  std::string headers = RunCommand("curl -sS -D - -o " + file + " " + url + "/metrics", &status);
  ASSERT_EQ(status, 0) << "curl failed; run scripts/setup";
  EXPECT_NE(headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            std::string::npos)
      << headers;
  std::string promtool = RunCommand("promtool check metrics < " + file + " 2>&1", &status);
  EXPECT_EQ(status, 0) << promtool;
  std::string body = ReadFile(file);
  for (const char* expected :
       {"stitch_requests_total{method=\"Compile\",result=\"compiled\",shape=\"exact\"} 1",
        "stitch_requests_total{method=\"Lookup\",result=\"hit_memory\",shape=\"exact\"} 1",
        "stitch_compiles_total{result=\"ok\"} 1", "stitch_lookup_duration_seconds_bucket",
        "stitch_compile_duration_seconds_count 1", "stitch_cache_entries{tier=\"disk\"} 1",
        "stitch_cache_capacity_bytes{tier=\"memory\"}", "stitch_build_info{",
        "process_resident_memory_bytes", "stitch_gpu_seconds_saved_total",
        "stitch_compile_seconds_saved_total", "stitch_compile_queue_depth 0",
        "stitch_compiles_in_flight 0", "stitch_cache_evictions_total{tier=\"memory\"} 0"}) {
    EXPECT_NE(body.find(expected), std::string::npos) << expected << "\n" << body;
  }
  std::string health = RunCommand("curl -sS " + url + "/healthz", &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(health, "ok\n");
}

// Whether `d` has taken a compile up within `wait`: queued, in flight or done.
bool CompileReachedTheDaemon(Client& c, std::chrono::seconds wait) {
  const auto end = steady_clock::now() + wait;
  while (steady_clock::now() < end) {
    StatusOr<v1::StatsResponse> s = c.Stats();
    if (s.ok() && (s->queue_depth() > 0 || s->compiles_in_flight() > 0 || s->compiles() > 0)) {
      return true;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

TEST_F(StitchdTest, CompilePastItsDeadlineStillLandsInTheCache) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  // Connect first: on a loaded machine a channel's connection alone can outlast 20 ms.
  ASSERT_EQ(StatsOf(c).compiles(), 0u);
  v1::CompileRequest request = LongChainRequest(100, 1024);
  // The case under test is a request that reaches the daemon and outlives its deadline there.
  // Under sanitizers with both cores busy a 20 ms call can expire before it leaves the client;
  // one the daemon never took up (nothing queued, compiling or compiled 10 s on) is asked
  // again with twice the deadline.
  client::Result late;
  bool reached = false;
  for (milliseconds deadline(20); !reached && deadline <= milliseconds(1280); deadline *= 2) {
    late = c.Compile(request, deadline);
    if (late.outcome != Outcome::kFallback) break;
    reached = CompileReachedTheDaemon(c, std::chrono::seconds(10));
  }
  ASSERT_TRUE(reached) << late.reason << "\n" << d.log();
  EXPECT_EQ(late.outcome, Outcome::kFallback);
  EXPECT_NE(late.reason.find("DEADLINE_EXCEEDED"), std::string::npos) << late.reason;
  auto end = steady_clock::now() + std::chrono::seconds(120);
  client::Result hit;
  while (steady_clock::now() < end) {
    hit = c.Lookup(request);
    if (hit.ok()) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(hit.outcome, Outcome::kMemory) << hit.reason << "\n" << d.log();
  EXPECT_EQ(StatsOf(c).compiles(), 1u);
}

TEST_F(StitchdTest, FullCompileQueueAnswersResourceExhausted) {
  StitchdProcess d(Paths(), {"--workers", "1", "--max-queue", "1"});
  ASSERT_TRUE(d.started()) << d.log();
  constexpr int kRequests = 8;
  std::vector<client::Result> results(kRequests);
  std::latch start(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      Client c(PatientClientOptions(d));
      start.arrive_and_wait();
      results[static_cast<size_t>(i)] = c.Compile(LongChainRequest(40 + i, 256));
    });
  }
  for (std::thread& t : threads) t.join();
  int ok = 0, exhausted = 0;
  for (const client::Result& r : results) {
    ok += r.ok();
    exhausted += r.reason.rfind("RESOURCE_EXHAUSTED", 0) == 0;
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  EXPECT_EQ(ok + exhausted, kRequests);
  Client c(PatientClientOptions(d));
  EXPECT_EQ(StatsOf(c).rejected(), static_cast<uint64_t>(exhausted));
}

TEST_F(StitchdTest, SigtermDrainsAnInFlightCompile) {
  v1::CompileRequest request = LongChainRequest(100, 1024);
  {
    // A drain long enough for the compile on a loaded CI machine: the test is about the
    // compile landing, not about how fast it is.
    StitchdProcess d(Paths(), {"--drain-seconds", "120"});
    ASSERT_TRUE(d.started()) << d.log();
    Client c(PatientClientOptions(d));
    std::future<client::Result> pending = c.CompileAsync(request);
    // Wait until the compile runs, then ask the daemon to stop.
    auto end = steady_clock::now() + std::chrono::seconds(30);
    while (steady_clock::now() < end && StatsOf(c).compiles_in_flight() == 0) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    ::kill(d.pid(), SIGTERM);
    client::Result r = pending.get();
    EXPECT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
    EXPECT_EQ(d.Wait(std::chrono::seconds(120)), 0) << d.log();
    EXPECT_NE(d.log().find("draining"), std::string::npos);
  }
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  EXPECT_EQ(c.Lookup(request).outcome, Outcome::kDisk);
}

TEST_F(StitchdTest, MultiMebibyteMessagesGoThrough) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  // Node names are for messages only, so long ones make a large but valid graph.
  v1::CompileRequest request = LongChainRequest(20, 64);
  for (v1::Node& n : *request.mutable_graph()->mutable_nodes()) {
    n.set_name(std::string(320 << 10, 'n'));
  }
  ASSERT_GT(request.ByteSizeLong(), 6u << 20);
  Client c(PatientClientOptions(d));
  client::Result r = c.Compile(request);
  EXPECT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
}

TEST_F(StitchdTest, UsageReportsCreditTheCostModelsSavings) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  client::Result r = c.Compile(HloRequest(SoftmaxHlo(128, 768)));
  ASSERT_TRUE(r.ok()) << r.reason;
  c.RecordInvocations(r.key, 1000);
  c.RecordInvocations(r.key, 500);
  c.RecordInvocations(std::string(64, 'a'), 7);
  StatusOr<v1::ReportUsageResponse> sent = c.FlushUsage();
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  EXPECT_EQ(sent->accepted(), 1u);
  EXPECT_EQ(sent->unknown_keys(), 1u);
  v1::StatsResponse s = StatsOf(c);
  EXPECT_EQ(s.invocations_reported(), 1500u);
  const v1::CostEstimate& cost = r.bundle->cost();
  EXPECT_GT(cost.baseline_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(s.gpu_seconds_saved(),
                   1500 * (cost.baseline_seconds() - cost.stitched_seconds()));
  c.RecordInvocations("not-a-key", 1);
  EXPECT_FALSE(c.FlushUsage().ok());
}

TEST_F(StitchdTest, EachJobsFallbackPricesItsSavingsUnderItsOwnLabel) {
  const v1::CompileRequest request = HloRequest(SoftmaxHlo(256, 3000));
  std::map<std::string, double> seconds;  // per plan of the bundle's estimate
  double shipped = 0;
  {
    StitchdProcess d(Paths());
    ASSERT_TRUE(d.started()) << d.log();
    for (v1::Fallback fallback :
         {v1::FALLBACK_XLA, v1::FALLBACK_INDUCTOR, v1::FALLBACK_EAGER, v1::FALLBACK_UNSPECIFIED}) {
      ClientOptions o = PatientClientOptions(d);
      o.fallback = fallback;
      Client c(o);
      client::Result r = c.Compile(request);
      ASSERT_TRUE(r.ok()) << r.reason;
      for (const v1::PlanEstimate& p : r.bundle->cost().plans()) seconds[p.planner()] = p.seconds();
      shipped = r.bundle->cost().stitched_seconds();
      c.RecordInvocations(r.key, 1000);
      ASSERT_TRUE(c.FlushUsage().ok());
    }
    ASSERT_TRUE(seconds.count("xla") && seconds.count("inductor") && seconds.count("eager"));
    // Without a compiler every op is a kernel: the eager job saves the most.
    EXPECT_GT(seconds["eager"], std::max(seconds["xla"], seconds["inductor"]));
    const double better = std::min(seconds["xla"], seconds["inductor"]);
    for (const auto& [label, expected] :
         std::map<std::string, double>{{"xla", 1000 * (seconds["xla"] - shipped)},
                                       {"inductor", 1000 * (seconds["inductor"] - shipped)},
                                       {"eager", 1000 * (seconds["eager"] - shipped)},
                                       {"unreported", 1000 * (better - shipped)}}) {
      const std::string series =
          "stitch_gpu_seconds_saved_total{baseline=\"" + label + "\",basis=\"modeled\"}";
      EXPECT_NEAR(ScrapeMetric(d, series), expected, 1e-9 + 1e-6 * expected) << series;
      EXPECT_EQ(
          ScrapeMetric(d, "stitch_kernel_invocations_reported_total{baseline=\"" + label + "\"}"),
          1000);
    }
    EXPECT_EQ(d.Stop(), 0) << d.log();
  }
  // The labelled totals survive a restart, each under its own label.
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  EXPECT_NEAR(ScrapeMetric(d, "stitch_gpu_seconds_saved_total{baseline=\"xla\",basis=\"modeled\"}"),
              1000 * (seconds["xla"] - shipped), 1e-9 + 1e-6 * seconds["xla"] * 1000);
  Client c(PatientClientOptions(d));
  EXPECT_EQ(StatsOf(c).invocations_reported(), 4000u);
}

// A job that times its kernels: once both sides of a key have samples, its savings are priced
// from them (and a measured regression is counted as time lost); the model's figure is kept
// beside; the timings and the totals survive a restart; stitchctl exports them.
TEST_F(StitchdTest, MeasuredTimesReplaceTheModelAndSurviveARestart) {
  using client::TimedKernels;
  std::string faster, slower;
  double model_saved = 0;
  {
    StitchdProcess d(Paths());
    ASSERT_TRUE(d.started()) << d.log();
    ClientOptions o = PatientClientOptions(d);
    o.fallback = v1::FALLBACK_XLA;
    Client c(o);
    client::Result a = c.Compile(HloRequest(SoftmaxHlo(128, 768)));
    client::Result b = c.Compile(HloRequest(SoftmaxHlo(64, 1000)));
    ASSERT_TRUE(a.ok() && b.ok()) << a.reason << b.reason;
    faster = a.key;
    slower = b.key;
    for (const client::Result* r : {&a, &b}) {
      for (const v1::PlanEstimate& p : r->bundle->cost().plans()) {
        if (p.planner() == "xla")
          model_saved += 1000 * (p.seconds() - r->bundle->cost().stitched_seconds());
      }
    }
    // Too few fallback samples at first: still modeled.
    c.RecordInvocations(faster, 1000);
    ASSERT_TRUE(c.RecordMeasuredTime(faster, TimedKernels::kStitched, 4 * 20e-6, 4).ok());
    ASSERT_TRUE(c.RecordMeasuredTime(faster, TimedKernels::kFallback, 50e-6, 1).ok());
    StatusOr<v1::ReportUsageResponse> sent = c.FlushUsage();
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    EXPECT_EQ(sent->accepted(), 1u);
    EXPECT_EQ(sent->measured(), 0u);
    // Two more fallback samples, and a second key jobs timed slower than XLA's kernels.
    ASSERT_TRUE(c.RecordMeasuredTime(faster, TimedKernels::kFallback, 2 * 50e-6, 2).ok());
    c.RecordInvocations(slower, 1000);
    ASSERT_TRUE(c.RecordMeasuredTime(slower, TimedKernels::kStitched, 3 * 100e-6, 3).ok());
    ASSERT_TRUE(c.RecordMeasuredTime(slower, TimedKernels::kFallback, 3 * 40e-6, 3).ok());
    EXPECT_EQ(c.RecordMeasuredTime(slower, TimedKernels::kFallback, -1, 1).code(),
              StatusCode::kInvalidArgument);
    sent = c.FlushUsage();
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    EXPECT_EQ(sent->measured(), 1u);  // `faster` had no invocations in this batch

    c.RecordInvocations(faster, 1000);
    sent = c.FlushUsage();
    ASSERT_TRUE(sent.ok() && sent->measured() == 1u);
    v1::StatsResponse s = StatsOf(c);
    EXPECT_NEAR(s.gpu_seconds_saved_measured(), 1000 * 30e-6, 1e-9);
    EXPECT_NEAR(s.gpu_seconds_lost(), 1000 * 60e-6, 1e-9);
    EXPECT_EQ(s.runtime_keys(), 2u);
    EXPECT_NEAR(
        ScrapeMetric(d, "stitch_gpu_seconds_saved_total{baseline=\"xla\",basis=\"measured\"}"),
        0.03, 1e-9);
    EXPECT_NEAR(ScrapeMetric(d, "stitch_gpu_seconds_lost_total{baseline=\"xla\"}"), 0.06, 1e-9);
    // The first 1000 invocations of `faster` were priced by the model, the second by measurement;
    // the model-only figure covers all 3000.
    double faster_model = 0;
    for (const v1::PlanEstimate& p : a.bundle->cost().plans()) {
      if (p.planner() == "xla") faster_model = p.seconds() - a.bundle->cost().stitched_seconds();
    }
    EXPECT_NEAR(ScrapeMetric(d, "stitch_model_gpu_seconds_saved_total{baseline=\"xla\"}"),
                model_saved + 1000 * faster_model, 1e-9);
    EXPECT_NEAR(
        ScrapeMetric(d, "stitch_key_seconds_per_call{basis=\"measured\",kernels=\"xla\",key=\"" +
                            slower + "\"}"),
        40e-6, 1e-12);
    EXPECT_EQ(ScrapeMetric(d, "stitch_measured_samples_total{kernels=\"fallback\"}"), 6);
    EXPECT_EQ(d.Stop(), 0) << d.log();
  }
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  EXPECT_NEAR(StatsOf(c).gpu_seconds_saved_measured(), 0.03, 1e-9);
  EXPECT_NEAR(StatsOf(c).gpu_seconds_lost(), 0.06, 1e-9);
  StatusOr<v1::ListRuntimesResponse> list = c.ListRuntimes(10);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->runtimes_size(), 2);
  std::map<std::string, v1::KernelRuntimes> by_key;
  for (const v1::KernelRuntimes& r : list->runtimes()) by_key[r.key()] = r;
  EXPECT_EQ(by_key[faster].stitched().samples(), 4u);
  EXPECT_EQ(by_key[faster].fallback().at("xla").samples(), 3u);
  EXPECT_EQ(by_key[faster].fallback().at("xla").reports(), 2u);
  EXPECT_EQ(by_key[faster].invocations(), 2000u);
  EXPECT_GT(by_key[slower].modeled_fallback_seconds().at("xla"), 0);
  // A job that never timed these keys reads the timings with its kernels, after the restart.
  client::Result again = c.Compile(HloRequest(SoftmaxHlo(64, 1000)));
  ASSERT_TRUE(again.ok()) << again.reason;
  ASSERT_NE(again.runtimes, nullptr);
  EXPECT_EQ(again.runtimes->key(), slower);
  EXPECT_EQ(again.runtimes->stitched().samples(), 3u);
  EXPECT_NEAR(again.runtimes->fallback().at("xla").seconds_sum(), 3 * 40e-6, 1e-12);
  client::Result untimed = c.Compile(HloRequest(SoftmaxHlo(32, 1000)));
  ASSERT_TRUE(untimed.ok()) << untimed.reason;
  EXPECT_EQ(untimed.runtimes, nullptr);

  int status = 0;
  const std::string out =
      RunCommand(std::string(STITCH_BINARY_DIR) + "/client/stitchctl runtimes --csv --daemon " +
                     Paths().socket,
                 &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.rfind("key,target,kernels,samples,measured_seconds,", 0), 0u) << out;
  EXPECT_NE(out.find(slower + ",sm_90,xla,3,4e-05,"), std::string::npos) << out;
  EXPECT_NE(out.find(faster + ",sm_90,stitched,4,2e-05,"), std::string::npos) << out;
}

// Timings a client library would never send are refused by the daemon, naming the problem.
TEST_F(StitchdTest, MalformedTimingsAreInvalidArgument) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  auto stub = v1::KernelService::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  const auto send = [&](double seconds, uint64_t samples) {
    v1::ReportUsageRequest request;
    v1::UsageRecord* r = request.add_records();
    r->set_key(std::string(64, 'a'));
    r->mutable_fallback()->set_seconds(seconds);
    r->mutable_fallback()->set_samples(samples);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ReportUsageResponse response;
    return stub->ReportUsage(&context, request, &response);
  };
  for (const auto& [seconds, samples, message] :
       {std::tuple<double, uint64_t, std::string>{std::nan(""), 1, "finite"},
        {-1e-6, 1, "not negative"},
        {1e-3, 0, "seconds without samples"},
        {61, 1, "60 s per invocation"}}) {
    const grpc::Status status = send(seconds, samples);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message;
    EXPECT_NE(status.error_message().find("fallback timing: "), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find(message), std::string::npos) << status.error_message();
  }
  EXPECT_TRUE(send(1e-3, 10).ok());  // an unknown key, well formed
}

TEST_F(StitchdTest, HealthServiceReportsServing) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  // An empty HealthCheckRequest asks about the whole server.
  std::string bytes;
  grpc::Status status = CallRaw(d.address(), "/grpc.health.v1.Health/Check", "", &bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();
  // HealthCheckResponse{status: SERVING}: field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(StitchdTest, StitchctlCompilesListsAndShowsEntriesThroughTheDaemon) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  std::string stitchctl = std::string(STITCH_BINARY_DIR) + "/client/stitchctl";
  std::string socket = Paths().socket;
  std::string file = std::string(STITCH_CORPUS_DIR) + "/hlo/extracted/layernorm_fwd_2d1_f32.hlo";
  int status = 0;
  std::string out = RunCommand(stitchctl + " compile " + file + " --daemon " + socket, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.rfind("compiled", 0), 0u) << out;
  std::string key = out.substr(out.find_first_of("0123456789abcdef", 8), 64);
  out = RunCommand(stitchctl + " compile " + file + " --daemon unix://" + socket, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.rfind("hit_memory " + key, 0), 0u) << out;

  out = RunCommand(stitchctl + " stats --json --daemon " + socket, &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json stats = nlohmann::json::parse(out);
  EXPECT_EQ(stats["compiles"], 1);
  EXPECT_EQ(stats["hits_memory"], 1);
  EXPECT_EQ(stats["entries"], 1);

  out = RunCommand(stitchctl + " cache ls --daemon " + socket, &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(out.find(key + "  sm_90"), std::string::npos) << out;

  out = RunCommand(stitchctl + " cache get " + key + " --json --daemon " + socket, &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json bundle = nlohmann::json::parse(out);
  EXPECT_EQ(bundle["key"], key);
  EXPECT_GT(bundle["kernels"].size(), 0u);
  // Exactly the kernels with grid barriers ask their launcher for a cooperative launch, and
  // each has a workspace for them.
  for (const nlohmann::json& k : bundle["kernels"]) {
    EXPECT_EQ(k["cooperative"].get<bool>(), k["kind"] == "global_stitch") << k.dump();
    if (k["cooperative"].get<bool>()) {
      EXPECT_GT(k["workspace_bytes"].get<uint64_t>(), 0u);
    }
  }

  out = RunCommand(stitchctl + " cache get nothex --daemon " + socket + " 2>&1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("INVALID_ARGUMENT"), std::string::npos) << out;
  out = RunCommand(
      stitchctl + " cache get " + std::string(64, 'b') + " --daemon " + socket + " 2>&1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
  out = RunCommand(stitchctl + " stats --daemon " + dir_.path() + "/nobody.sock 2>&1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(out.rfind("stitchctl: ", 0), 0u) << out;
}

// Batch-norm statistics over the rows: a global_stitch kernel, whose grid barrier depends on
// the co-residency annotation.
constexpr const char* kBatchNormStatisticsHlo = R"(HloModule bn_statistics
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4096,64] parameter(0)
  z = f32[] constant(0)
  s = f32[64] reduce(x, z), dimensions={0}, to_apply=add_f
  n = f32[] constant(0.000244140625)
  nb = f32[64] broadcast(n), dimensions={}
  mean = f32[64] multiply(s, nb)
  mb = f32[4096,64] broadcast(mean), dimensions={1}
  c = f32[4096,64] subtract(x, mb)
  sq = f32[4096,64] multiply(c, c)
  v = f32[64] reduce(sq, z), dimensions={0}, to_apply=add_f
  var = f32[64] multiply(v, nb)
  ROOT t = (f32[4096,64], f32[64]) tuple(c, var)
}
)";

// A daemon on an H200 node plans for sm_90/h200. A job that names only its GPU's
// architecture, as PyTorch's compute capability gives it, gets the node's device of it; one
// that names a device gets that device's plans, under their own key.
TEST_F(StitchdTest, AnArchitectureAloneMeansTheNodesDeviceOfIt) {
  StitchdProcess d(Paths(), {"--target", "sm_90/h200"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  const auto compile = [&](const char* target) {
    v1::CompileRequest request = HloRequest(SoftmaxHlo(64, 256));
    request.set_target(target);
    return c.Compile(request);
  };
  const client::Result node = compile("");
  ASSERT_TRUE(node.ok()) << node.reason;
  EXPECT_EQ(node.bundle->target(), "sm_90");
  for (const char* same : {"sm_90", "sm_90/h200", "sm_90/H200"}) {
    const client::Result r = compile(same);
    ASSERT_TRUE(r.ok()) << same << ": " << r.reason;
    EXPECT_EQ(r.key, node.key) << same;
    EXPECT_EQ(r.outcome, Outcome::kMemory) << same;
  }
  const client::Result h100 = compile("sm_90/h100");
  ASSERT_TRUE(h100.ok()) << h100.reason;
  EXPECT_NE(h100.key, node.key);
  EXPECT_EQ(h100.outcome, Outcome::kCompiled);
  // Another architecture is taken as named.
  const client::Result a100 = compile("sm_80");
  ASSERT_TRUE(a100.ok()) << a100.reason;
  EXPECT_EQ(a100.bundle->target(), "sm_80");
  EXPECT_EQ(StatsOf(c).compiles(), 3u);
}

TEST_F(StitchdTest, EveryAcceptedTargetGetsAnnotatedKernelsAndCosts) {
  StitchdProcess d(Paths());
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  for (const Target& target : Target::Supported()) {
    SCOPED_TRACE(target.name());
    v1::CompileRequest request = HloRequest(kBatchNormStatisticsHlo);
    request.set_target(target.name());
    client::Result r = c.Compile(request);
    ASSERT_TRUE(r.ok()) << r.reason;
    EXPECT_EQ(r.bundle->target(), target.arch());
    EXPECT_GT(r.bundle->cost().stitched_seconds(), 0.0);
    EXPECT_GT(r.bundle->cost().baseline_seconds(), 0.0);
    bool annotated = false;
    for (const v1::Kernel& k : r.bundle->kernels()) {
      if (k.kind() != "global_stitch") continue;
      annotated = k.ptx().find(".minnctapersm") != std::string::npos;
    }
    EXPECT_TRUE(annotated) << r.bundle->plan();
  }
  // A target the compiler has no device for is the caller's error, naming what is supported.
  v1::CompileRequest unknown = HloRequest(kBatchNormStatisticsHlo);
  unknown.set_target("sm_70");
  client::Result r = c.Compile(unknown);
  EXPECT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_EQ(r.reason.rfind("INVALID_ARGUMENT", 0), 0u) << r.reason;
  EXPECT_NE(r.reason.find(Target::SupportedList()), std::string::npos) << r.reason;
}

}  // namespace
}  // namespace stitch::testing
