// Compiles isolated from the daemon, against a real stitchd: a compile that aborts, spins past
// its CPU limit, allocates past its memory limit or sleeps past its wall-clock limit costs its
// request alone; the daemon keeps serving hits, restarts the worker, remembers the failure
// for a TTL and counts it by kind. Bundles from a worker equal those compiled in-thread.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "stitch/client/client.h"
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

// A request whose graph the worker's test hook turns into `fault` (abort, spin, oom, sleep).
// `length` keeps the keys of different faults apart: the key ignores the graph's name.
v1::CompileRequest FaultRequest(const std::string& fault, int length) {
  v1::CompileRequest r = LongChainRequest(length, 8);
  r.mutable_graph()->set_name("stitch.fault." + fault);
  return r;
}

double Failures(const StitchdProcess& d, const std::string& kind) {
  return ScrapeMetric(d, "stitch_compile_failures_total{kind=\"" + kind + "\"}");
}

class StitchdIsolationTest : public ::testing::Test {
 protected:
  DaemonPaths Paths(const std::string& name) const { return dir_.Daemon(name); }

  TempDir dir_;
};

TEST_F(StitchdIsolationTest, FaultsCostOneRequestAndAreRememberedAndCountedByKind) {
  StitchdProcess d(Paths("faults"), {"--compile-fault-injection", "--compile-cpu-seconds", "1",
                                     "--compile-memory-bytes", "2GiB", "--compile-timeout-seconds",
                                     "30", "--negative-cache-seconds", "60"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  const v1::CompileRequest good = HloRequest(SoftmaxHlo(4, 32));
  client::Result first = c.Compile(good);
  ASSERT_EQ(first.outcome, Outcome::kCompiled) << first.reason;

  // An abort kills the worker: the request gets the cause, the daemon lives on.
  client::Result aborted = c.Compile(FaultRequest("abort", 2));
  ASSERT_EQ(aborted.outcome, Outcome::kFallback);
  EXPECT_NE(aborted.reason.find("INTERNAL"), std::string::npos) << aborted.reason;
  EXPECT_NE(aborted.reason.find("compile worker died: SIGABRT (abort) while compiling"),
            std::string::npos)
      << aborted.reason;
  EXPECT_TRUE(d.alive());
  EXPECT_EQ(c.Compile(good).outcome, Outcome::kMemory);
  EXPECT_EQ(Failures(d, "crash"), 1);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compile_worker_restarts_total"), 1);

  // The same graph again, within the TTL: the remembered error at once, no compile.
  const auto again_at = steady_clock::now();
  client::Result again = c.Compile(FaultRequest("abort", 2));
  EXPECT_LT(steady_clock::now() - again_at, std::chrono::seconds(1));
  ASSERT_EQ(again.outcome, Outcome::kFallback);
  EXPECT_NE(again.reason.find("SIGABRT"), std::string::npos) << again.reason;
  EXPECT_NE(again.reason.find("not compiled again for 60 s"), std::string::npos) << again.reason;
  EXPECT_EQ(ScrapeMetric(d, "stitch_negative_cache_hits_total"), 1);
  EXPECT_EQ(Failures(d, "crash"), 1);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compile_worker_restarts_total"), 1);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compiles_total{result=\"error\"}"), 1);

  client::Result spun = c.Compile(FaultRequest("spin", 3));
  ASSERT_EQ(spun.outcome, Outcome::kFallback);
  EXPECT_NE(spun.reason.find("RESOURCE_EXHAUSTED"), std::string::npos) << spun.reason;
  EXPECT_NE(spun.reason.find("compile exceeded its CPU limit of 1 s"), std::string::npos)
      << spun.reason;
  EXPECT_EQ(Failures(d, "cpu_limit"), 1);

  client::Result hoarded = c.Compile(FaultRequest("oom", 4));
  ASSERT_EQ(hoarded.outcome, Outcome::kFallback);
  EXPECT_NE(hoarded.reason.find("compile exceeded its memory limit of 2147483648 bytes"),
            std::string::npos)
      << hoarded.reason;
  EXPECT_EQ(Failures(d, "memory_limit"), 1);

  EXPECT_EQ(ScrapeMetric(d, "stitch_compile_worker_restarts_total"), 3);

  // Ordinary compiles still work on the restarted workers, and nothing else failed.
  client::Result fresh = c.Compile(HloRequest(SoftmaxHlo(8, 64)));
  EXPECT_EQ(fresh.outcome, Outcome::kCompiled) << fresh.reason;
  EXPECT_EQ(Failures(d, "error"), 0);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compiles_total{result=\"error\"}"), 3);
  EXPECT_TRUE(d.alive());
  EXPECT_EQ(d.Stop(), 0) << d.log();
}

TEST_F(StitchdIsolationTest, ACompilePastItsWallClockLimitIsKilledWhileHitsAreServed) {
  // A wall-clock limit of its own, short enough for a quick test: on a loaded machine a
  // spinning compile may take longer than this to use its CPU seconds, so the CPU test above
  // runs with a long one.
  StitchdProcess d(Paths("timeout"),
                   {"--compile-fault-injection", "--compile-timeout-seconds", "3"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  const v1::CompileRequest good = HloRequest(SoftmaxHlo(4, 32));
  ASSERT_EQ(c.Compile(good).outcome, Outcome::kCompiled);
  // A compile that sleeps past the wall-clock limit, while hits go on being served.
  auto slept = std::async(std::launch::async, [&] {
    Client other(PatientClientOptions(d));
    return other.Compile(FaultRequest("sleep", 5));
  });
  for (int i = 0; i < 20; ++i) {
    client::Result hit = c.Compile(good);
    EXPECT_EQ(hit.outcome, Outcome::kMemory) << hit.reason;
    std::this_thread::sleep_for(milliseconds(100));
  }
  client::Result timed_out = slept.get();
  ASSERT_EQ(timed_out.outcome, Outcome::kFallback);
  EXPECT_NE(timed_out.reason.find("compile exceeded its wall-clock limit of 3 s"),
            std::string::npos)
      << timed_out.reason;
  EXPECT_EQ(Failures(d, "timeout"), 1);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compile_worker_restarts_total"), 1);
  client::Result after = c.Compile(HloRequest(SoftmaxHlo(8, 64)));
  EXPECT_EQ(after.outcome, Outcome::kCompiled) << after.reason;
  EXPECT_TRUE(d.alive());
}

TEST_F(StitchdIsolationTest, AFailureIsRememberedOnlyForItsTtl) {
  StitchdProcess d(Paths("ttl"), {"--compile-fault-injection", "--negative-cache-seconds", "1"});
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  EXPECT_EQ(c.Compile(FaultRequest("abort", 2)).outcome, Outcome::kFallback);
  EXPECT_EQ(c.Compile(FaultRequest("abort", 2)).outcome, Outcome::kFallback);
  EXPECT_EQ(ScrapeMetric(d, "stitch_negative_cache_hits_total"), 1);
  EXPECT_EQ(Failures(d, "crash"), 1);
  std::this_thread::sleep_for(milliseconds(1100));
  // Past the TTL the graph is compiled again (and crashes its worker again).
  client::Result r = c.Compile(FaultRequest("abort", 2));
  ASSERT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_EQ(r.reason.find("not compiled again"), std::string::npos) << r.reason;
  EXPECT_EQ(Failures(d, "crash"), 2);
  EXPECT_EQ(ScrapeMetric(d, "stitch_negative_cache_hits_total"), 1);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compile_worker_restarts_total"), 2);
}

TEST_F(StitchdIsolationTest, FaultGraphsCompileNormallyWithoutTheTestHook) {
  // The hook is off by default: a graph named like a fault is an ordinary graph.
  StitchdProcess d(Paths("nohook"));
  ASSERT_TRUE(d.started()) << d.log();
  Client c(PatientClientOptions(d));
  client::Result r = c.Compile(FaultRequest("abort", 2));
  EXPECT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
  EXPECT_EQ(Failures(d, "crash"), 0);
  EXPECT_EQ(ScrapeMetric(d, "stitch_compile_worker_restarts_total"), 0);
}

TEST_F(StitchdIsolationTest, WorkerBundlesEqualInThreadBundles) {
  const v1::CompileRequest request = HloRequest(SoftmaxHlo(16, 128));
  v1::KernelBundle bundles[2];
  const char* modes[2] = {"process", "thread"};
  for (int i = 0; i < 2; ++i) {
    StitchdProcess d(Paths(modes[i]), {"--compile-isolation", modes[i]});
    ASSERT_TRUE(d.started()) << d.log();
    Client c(PatientClientOptions(d));
    client::Result r = c.Compile(request);
    ASSERT_EQ(r.outcome, Outcome::kCompiled) << modes[i] << ": " << r.reason;
    bundles[i] = *r.bundle;
  }
  ASSERT_GT(bundles[0].kernels_size(), 0);
  // The measured compile time differs from run to run, and the digest covers it.
  for (v1::KernelBundle& b : bundles) {
    b.clear_compile_seconds();
    b.clear_digest();
  }
  EXPECT_EQ(bundles[0].SerializeAsString(), bundles[1].SerializeAsString());
}

}  // namespace
}  // namespace stitch::testing
