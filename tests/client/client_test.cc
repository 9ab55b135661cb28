// The C++ client against scripted daemons: fail-open on dead, slow and overloaded daemons,
// the in-process cache, asynchronous calls, usage batches and the admin calls.
#include "stitch/client/client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "client/scripted_server.h"

namespace stitch::client {
namespace {

using stitch::testing::Answer;
using stitch::testing::HloRequest;
using stitch::testing::MakeBundle;
using stitch::testing::MakeTempDir;
using stitch::testing::ScriptedServer;
using stitch::testing::ScriptedService;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long long MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

ClientOptions OptionsFor(const std::string& address) {
  ClientOptions o;
  o.address = address;
  return o;
}

TEST(ClientDeadDaemon, LookupFallsBackWithinDeadline) {
  std::string dir = MakeTempDir();
  ClientOptions o = OptionsFor("unix://" + dir + "/nobody.sock");
  o.lookup_deadline = milliseconds(50);
  Client client(o);
  for (int i = 0; i < 3; ++i) {
    auto start = Clock::now();
    Result r = client.Lookup(HloRequest("m"));
    long long ms = MsSince(start);
    EXPECT_EQ(r.outcome, Outcome::kFallback);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.bundle, nullptr);
    // Within the deadline plus scheduling slack (generous for loaded and sanitizer builds),
    // not after gRPC's reconnect backoff, which takes seconds.
    EXPECT_LT(ms, 50 + 1000) << "attempt " << i;
    EXPECT_TRUE(StartsWith(r.reason, "UNAVAILABLE") || StartsWith(r.reason, "DEADLINE_EXCEEDED"))
        << r.reason;
  }
  std::filesystem::remove_all(dir);
}

TEST(ClientDeadDaemon, CompileFailsFastInsteadOfWaitingForTheDeadline) {
  // A socket file whose listener is gone (a crashed daemon): connect() is refused.
  std::string dir = MakeTempDir();
  std::string path = dir + "/stale.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);

  ClientOptions o = OptionsFor(path);  // a bare path is a unix socket
  o.compile_deadline = milliseconds(5000);
  Client client(o);
  auto start = Clock::now();
  Result r = client.Compile(HloRequest("m"));
  EXPECT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_TRUE(StartsWith(r.reason, "UNAVAILABLE")) << r.reason;
  EXPECT_LT(MsSince(start), 1000) << "the call waited for the daemon instead of failing";
  std::filesystem::remove_all(dir);
}

TEST(ClientSlowDaemon, LookupDeadlineExceeded) {
  ScriptedService service;
  service.lookup = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    std::this_thread::sleep_for(milliseconds(2500));
    return Answer(v1::CompileResponse::MEMORY)(req, resp);
  };
  ScriptedServer server(&service);
  ClientOptions o = OptionsFor(server.address());
  o.lookup_deadline = milliseconds(50);
  Client client(o);
  auto start = Clock::now();
  Result r = client.Lookup(HloRequest("slow"));
  long long ms = MsSince(start);
  EXPECT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_TRUE(StartsWith(r.reason, "DEADLINE_EXCEEDED")) << r.reason;
  // Long before the server answers (2.5 s).
  EXPECT_LT(ms, 1000);
  // Never retried. On a loaded machine the deadline may pass before the server takes the call.
  EXPECT_LE(service.lookup_calls.load(), 1);
}

TEST(ClientSlowDaemon, PerCallCompileDeadline) {
  ScriptedService service;
  service.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    std::this_thread::sleep_for(milliseconds(1500));
    return Answer(v1::CompileResponse::COMPILED)(req, resp);
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  auto start = Clock::now();
  Result r = client.Compile(HloRequest("slow"), milliseconds(60));
  EXPECT_TRUE(StartsWith(r.reason, "DEADLINE_EXCEEDED")) << r.reason;
  // Long before the server answers (1.5 s); the margin is for sanitizer builds on a loaded
  // machine, where the 60 ms deadline has been seen to take 280 ms.
  EXPECT_LT(MsSince(start), 1000);
  // The default compile deadline (10 s) lets the same request through.
  Result ok = client.Compile(HloRequest("slow"));
  EXPECT_EQ(ok.outcome, Outcome::kCompiled) << ok.reason;
}

TEST(ClientOverloadedDaemon, ResourceExhaustedIsAFallbackWithTheReason) {
  ScriptedService service;
  service.compile = [](const v1::CompileRequest&, v1::CompileResponse*) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "compile queue full (64)");
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  Result r = client.Compile(HloRequest("m"));
  EXPECT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_EQ(r.reason, "RESOURCE_EXHAUSTED: compile queue full (64)");
  EXPECT_EQ(r.bundle, nullptr);
  // Failures are not cached: the next identical call asks the daemon again.
  Result again = client.Compile(HloRequest("m"));
  EXPECT_EQ(again.outcome, Outcome::kFallback);
  EXPECT_EQ(service.compile_calls.load(), 2);
}

TEST(ClientCache, SecondIdenticalRequestIsServedLocally) {
  ScriptedService service;
  service.compile = Answer(v1::CompileResponse::COMPILED, 3);
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));

  Result first = client.Compile(HloRequest("a", "sm_90"));
  ASSERT_EQ(first.outcome, Outcome::kCompiled) << first.reason;
  ASSERT_NE(first.bundle, nullptr);
  EXPECT_EQ(first.bundle->kernels_size(), 3);
  EXPECT_FALSE(first.key.empty());
  EXPECT_EQ(first.bundle->key(), first.key);
  EXPECT_TRUE(first.reason.empty());
  EXPECT_EQ(service.compile_calls.load(), 1);

  Result second = client.Compile(HloRequest("a", "sm_90"));
  EXPECT_EQ(second.outcome, Outcome::kLocal);
  EXPECT_EQ(second.bundle, first.bundle);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(service.compile_calls.load(), 1) << "a local hit must not reach the daemon";

  // Lookups share the cache.
  Result looked = client.Lookup(HloRequest("a", "sm_90"));
  EXPECT_EQ(looked.outcome, Outcome::kLocal);
  EXPECT_EQ(service.lookup_calls.load(), 0);

  // Any difference in the request (here the target) is a different entry.
  Result other = client.Compile(HloRequest("a", "sm_80"));
  EXPECT_EQ(other.outcome, Outcome::kCompiled);
  EXPECT_EQ(service.compile_calls.load(), 2);
}

TEST(ClientCache, DaemonSourcesMapToOutcomes) {
  ScriptedService service;
  service.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    const std::string& text = req.hlo_text();
    auto source = text.find("mem") != std::string::npos    ? v1::CompileResponse::MEMORY
                  : text.find("disk") != std::string::npos ? v1::CompileResponse::DISK
                  : text.find("none") != std::string::npos ? v1::CompileResponse::SOURCE_UNSPECIFIED
                                                           : v1::CompileResponse::COMPILED;
    return Answer(source)(req, resp);
  };
  ScriptedServer server(&service);
  ClientOptions o = OptionsFor(server.address());
  o.local_cache_entries = 0;
  Client client(o);
  EXPECT_EQ(client.Compile(HloRequest("mem")).outcome, Outcome::kMemory);
  EXPECT_EQ(client.Compile(HloRequest("disk")).outcome, Outcome::kDisk);
  EXPECT_EQ(client.Compile(HloRequest("new")).outcome, Outcome::kCompiled);
  Result none = client.Compile(HloRequest("none"));
  EXPECT_EQ(none.outcome, Outcome::kFallback);
  EXPECT_TRUE(StartsWith(none.reason, "INTERNAL")) << none.reason;
  // With the cache disabled every call reaches the daemon.
  EXPECT_EQ(client.Compile(HloRequest("mem")).outcome, Outcome::kMemory);
  EXPECT_EQ(service.compile_calls.load(), 5);
}

TEST(ClientCache, LeastRecentlyUsedEntryIsEvicted) {
  ScriptedService service;
  service.compile = Answer(v1::CompileResponse::COMPILED);
  ScriptedServer server(&service);
  ClientOptions o = OptionsFor(server.address());
  o.local_cache_entries = 2;
  Client client(o);
  EXPECT_EQ(client.Compile(HloRequest("a")).outcome, Outcome::kCompiled);
  EXPECT_EQ(client.Compile(HloRequest("b")).outcome, Outcome::kCompiled);
  EXPECT_EQ(client.Compile(HloRequest("a")).outcome, Outcome::kLocal);  // b is now oldest
  EXPECT_EQ(client.Compile(HloRequest("c")).outcome, Outcome::kCompiled);
  EXPECT_EQ(client.Compile(HloRequest("a")).outcome, Outcome::kLocal);
  EXPECT_EQ(client.Compile(HloRequest("c")).outcome, Outcome::kLocal);
  EXPECT_EQ(client.Compile(HloRequest("b")).outcome, Outcome::kCompiled);
  EXPECT_EQ(service.compile_calls.load(), 4);
}

TEST(ClientLookup, MissIsNotFoundFallback) {
  ScriptedService service;
  service.lookup = [](const v1::CompileRequest&, v1::CompileResponse*) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry");
  };
  ScriptedServer server(&service);
  ClientOptions o = OptionsFor(server.address());
  o.lookup_deadline = milliseconds(2000);  // the first call also connects
  Client client(o);
  Result r = client.Lookup(HloRequest("m"));
  EXPECT_EQ(r.outcome, Outcome::kFallback);
  EXPECT_EQ(r.reason, "NOT_FOUND: no entry");
  EXPECT_EQ(service.compile_calls.load(), 0) << "Lookup must never compile";
}

TEST(ClientAsync, FutureForm) {
  ScriptedService service;
  service.compile = Answer(v1::CompileResponse::COMPILED, 1);
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  std::future<Result> f = client.CompileAsync(HloRequest("async"));
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Result r = f.get();
  EXPECT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
  ASSERT_NE(r.bundle, nullptr);
  EXPECT_EQ(r.bundle->kernels_size(), 1);
  // The asynchronous answer filled the in-process cache too.
  Result again = client.CompileAsync(HloRequest("async")).get();
  EXPECT_EQ(again.outcome, Outcome::kLocal);
  EXPECT_EQ(client.Compile(HloRequest("async")).outcome, Outcome::kLocal);
  EXPECT_EQ(service.compile_calls.load(), 1);
}

TEST(ClientAsync, CallbackRunsExactlyOnce) {
  ScriptedService service;
  service.compile = Answer(v1::CompileResponse::COMPILED);
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));

  constexpr int kCalls = 32;
  std::atomic<int> runs[kCalls] = {};
  std::atomic<int> compiled{0};
  std::atomic<int> total{0};
  for (int i = 0; i < kCalls; ++i) {
    client.CompileAsync(HloRequest("cb" + std::to_string(i % 8)), [&, i](Result r) {
      runs[i]++;
      if (r.ok()) compiled++;
      total++;
    });
  }
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (total.load() < kCalls && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(100));  // a second run would show up by now
  EXPECT_EQ(total.load(), kCalls);
  EXPECT_EQ(compiled.load(), kCalls);
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

TEST(ClientAsync, FailuresAndLocalHitsRunTheCallbackOnce) {
  ScriptedService service;
  service.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    if (req.hlo_text().find("slow") != std::string::npos) {
      std::this_thread::sleep_for(milliseconds(1500));
    }
    return Answer(v1::CompileResponse::COMPILED)(req, resp);
  };
  ScriptedServer server(&service);
  ClientOptions o = OptionsFor(server.address());
  // Long enough for the fast calls under ThreadSanitizer on a loaded machine (100 ms was not),
  // short enough that the slow one misses it.
  o.compile_deadline = milliseconds(500);
  Client client(o);

  Result slow = client.CompileAsync(HloRequest("slow")).get();
  EXPECT_TRUE(StartsWith(slow.reason, "DEADLINE_EXCEEDED")) << slow.reason;

  ASSERT_EQ(client.CompileAsync(HloRequest("fast")).get().outcome, Outcome::kCompiled);
  int runs = 0;
  Outcome seen = Outcome::kFallback;
  client.CompileAsync(HloRequest("fast"), [&](Result r) {
    ++runs;
    seen = r.outcome;
  });
  // A local hit runs `done` inline, before CompileAsync returns.
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(seen, Outcome::kLocal);

  std::string dir = MakeTempDir();
  Client dead(OptionsFor("unix://" + dir + "/nobody.sock"));
  std::atomic<int> dead_runs{0};
  std::promise<Result> p;
  dead.CompileAsync(HloRequest("x"), [&](Result r) {
    if (dead_runs++ == 0) p.set_value(std::move(r));
  });
  auto f = p.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(StartsWith(f.get().reason, "UNAVAILABLE"));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(dead_runs.load(), 1);
  std::filesystem::remove_all(dir);
}

TEST(ClientAsync, DestroyingTheClientWaitsForCallsInFlight) {
  ScriptedService service;
  service.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    std::this_thread::sleep_for(milliseconds(100));
    return Answer(v1::CompileResponse::COMPILED)(req, resp);
  };
  ScriptedServer server(&service);
  std::atomic<int> runs{0};
  {
    Client client(OptionsFor(server.address()));
    for (int i = 0; i < 4; ++i) {
      client.CompileAsync(HloRequest("d" + std::to_string(i)), [&](Result r) {
        EXPECT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
        runs++;
      });
    }
  }
  // Each callback started before the destructor returned; give the last ones time to end.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (runs.load() < 4 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(runs.load(), 4);
}

TEST(ClientUsage, FlushSendsSummedCountsPerKey) {
  ScriptedService service;
  service.report_usage = [](const v1::ReportUsageRequest& req, v1::ReportUsageResponse* resp) {
    resp->set_accepted(static_cast<uint32_t>(req.records_size()));
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));

  // Nothing pending: no RPC.
  ASSERT_TRUE(client.FlushUsage().ok());
  EXPECT_EQ(service.usage_calls.load(), 0);

  client.RecordInvocations("aa", 3);
  client.RecordInvocations("bb", 5);
  client.RecordInvocations("aa", 4);
  StatusOr<v1::ReportUsageResponse> r = client.FlushUsage();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->accepted(), 2u);
  std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 1u);
  std::map<std::string, uint64_t> counts;
  for (const v1::UsageRecord& rec : seen[0].records()) counts[rec.key()] += rec.invocations();
  EXPECT_EQ(seen[0].records_size(), 2);
  EXPECT_EQ(counts, (std::map<std::string, uint64_t>{{"aa", 7}, {"bb", 5}}));

  // The batch was cleared.
  ASSERT_TRUE(client.FlushUsage().ok());
  EXPECT_EQ(service.usage_calls.load(), 1);
  EXPECT_EQ(seen[0].fallback(), v1::FALLBACK_UNSPECIFIED);
}

TEST(ClientUsage, ReportsCarryTheJobsFallback) {
  ScriptedService service;
  service.report_usage = [](const v1::ReportUsageRequest&, v1::ReportUsageResponse*) {
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  ClientOptions options = OptionsFor(server.address());
  options.fallback = v1::FALLBACK_XLA;
  Client client(options);
  client.RecordInvocations("aa", 1);
  ASSERT_TRUE(client.FlushUsage().ok());
  client.SetFallback(v1::FALLBACK_INDUCTOR);
  client.RecordInvocations("aa", 1);
  ASSERT_TRUE(client.FlushUsage().ok());
  std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].fallback(), v1::FALLBACK_XLA);
  EXPECT_EQ(seen[1].fallback(), v1::FALLBACK_INDUCTOR);
}

TEST(ClientUsage, FailedFlushKeepsTheBatch) {
  ScriptedService service;
  std::atomic<bool> fail{true};
  service.report_usage = [&](const v1::ReportUsageRequest& req, v1::ReportUsageResponse* resp) {
    if (fail.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining");
    resp->set_accepted(static_cast<uint32_t>(req.records_size()));
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  client.RecordInvocations("aa", 3);
  client.RecordInvocations("bb", 5);
  StatusOr<v1::ReportUsageResponse> failed = client.FlushUsage();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("draining"), std::string::npos)
      << failed.status().ToString();

  client.RecordInvocations("aa", 1);
  client.RecordInvocations("cc", 2);
  fail = false;
  ASSERT_TRUE(client.FlushUsage().ok());
  std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 2u);
  std::map<std::string, uint64_t> counts;
  for (const v1::UsageRecord& rec : seen[1].records()) counts[rec.key()] += rec.invocations();
  EXPECT_EQ(counts, (std::map<std::string, uint64_t>{{"aa", 4}, {"bb", 5}, {"cc", 2}}));
}

TEST(ClientUsage, MeasuredTimesAreSummedPerKeyAndSideAndSurviveAFailedFlush) {
  using client::TimedKernels;
  ScriptedService service;
  std::atomic<bool> fail{true};
  service.report_usage = [&](const v1::ReportUsageRequest&, v1::ReportUsageResponse*) {
    return fail.load() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "later") : grpc::Status::OK;
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  ASSERT_TRUE(client.RecordMeasuredTime("aa", TimedKernels::kStitched, 3e-5, 3).ok());
  ASSERT_TRUE(client.RecordMeasuredTime("aa", TimedKernels::kFallback, 4e-5).ok());
  client.RecordInvocations("aa", 10);
  ASSERT_FALSE(client.FlushUsage().ok());
  ASSERT_TRUE(client.RecordMeasuredTime("aa", TimedKernels::kStitched, 1e-5, 1).ok());
  ASSERT_TRUE(client.RecordMeasuredTime("bb", TimedKernels::kFallback, 5e-5, 2).ok());
  // Refused, and nothing recorded.
  EXPECT_EQ(client.RecordMeasuredTime("aa", TimedKernels::kStitched, 1e-5, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client.RecordMeasuredTime("aa", TimedKernels::kStitched, std::nan(""), 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client.RecordMeasuredTime("aa", TimedKernels::kFallback, -1e-5, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client.RecordMeasuredTime("", TimedKernels::kFallback, 1e-5, 1).code(),
            StatusCode::kInvalidArgument);
  fail = false;
  ASSERT_TRUE(client.FlushUsage().ok());
  std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
  ASSERT_EQ(seen.size(), 2u);
  std::map<std::string, v1::UsageRecord> by_key;
  for (const v1::UsageRecord& rec : seen[1].records()) by_key[rec.key()] = rec;
  ASSERT_EQ(by_key.size(), 2u);
  EXPECT_EQ(by_key["aa"].invocations(), 10u);
  EXPECT_EQ(by_key["aa"].stitched().samples(), 4u);
  EXPECT_DOUBLE_EQ(by_key["aa"].stitched().seconds(), 4e-5);
  EXPECT_EQ(by_key["aa"].fallback().samples(), 1u);
  EXPECT_EQ(by_key["bb"].invocations(), 0u);
  EXPECT_FALSE(by_key["bb"].has_stitched());
  EXPECT_EQ(by_key["bb"].fallback().samples(), 2u);
}

TEST(ClientUsage, FallbackTimingIsSampledOnceAPeriod) {
  ClientOptions o = OptionsFor("unix:///nonexistent/stitchd.sock");
  o.fallback_timing_period = 4;
  Client client(o);
  std::string picks;
  for (int i = 0; i < 12; ++i) picks += client.ShouldTimeFallback() ? '1' : '0';
  EXPECT_EQ(picks, "000100010001");
  o.fallback_timing_period = 0;
  Client never(o);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(never.ShouldTimeFallback());
}

TEST(ClientUsage, DeadDaemonKeepsTheBatchWithinTheAdminDeadline) {
  std::string dir = MakeTempDir();
  ClientOptions o = OptionsFor("unix://" + dir + "/nobody.sock");
  o.admin_deadline = milliseconds(200);
  Client client(o);
  client.RecordInvocations("aa", 3);
  auto start = Clock::now();
  StatusOr<v1::ReportUsageResponse> r = client.FlushUsage();
  EXPECT_FALSE(r.ok());
  // gRPC answers a refused connection with UNAVAILABLE, or with DEADLINE_EXCEEDED when its
  // connection attempt outlives the deadline (as on a loaded, sanitized run): either is a
  // daemon not reached.
  EXPECT_TRUE(r.status().code() == StatusCode::kUnavailable ||
              r.status().code() == StatusCode::kDeadlineExceeded)
      << r.status().ToString();
  // Bounded by the admin deadline: well under what a call without it would wait (the
  // 10 s compile deadline, or for ever), with room for a loaded or sanitized run.
  EXPECT_LT(MsSince(start), 200 + 800);

  // The daemon comes up at that address: the kept batch reaches it.
  ScriptedService service;
  service.report_usage = [](const v1::ReportUsageRequest&, v1::ReportUsageResponse* resp) {
    resp->set_accepted(1);
    return grpc::Status::OK;
  };
  {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + dir + "/nobody.sock", grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    // Reconnect backoff is at most a second; retry flushes until one lands.
    StatusOr<v1::ReportUsageResponse> ok = Status(StatusCode::kUnavailable, "not tried");
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!ok.ok() && Clock::now() < deadline) {
      ok = client.FlushUsage();
      if (!ok.ok()) std::this_thread::sleep_for(milliseconds(100));
    }
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    std::vector<v1::ReportUsageRequest> seen = service.UsageRequests();
    ASSERT_EQ(seen.size(), 1u);
    ASSERT_EQ(seen[0].records_size(), 1);
    EXPECT_EQ(seen[0].records(0).key(), "aa");
    EXPECT_EQ(seen[0].records(0).invocations(), 3u);
    server->Shutdown();
  }
  std::filesystem::remove_all(dir);
}

TEST(ClientAdmin, StatsListAndGet) {
  ScriptedService service;
  service.stats = [](v1::StatsResponse* s) {
    s->set_version("0.1.0");
    s->set_hits_memory(12);
    s->set_entries(3);
    return grpc::Status::OK;
  };
  std::atomic<uint32_t> seen_limit{0};
  service.list = [&](const v1::ListEntriesRequest& req, v1::ListEntriesResponse* resp) {
    seen_limit = req.limit();
    v1::EntrySummary* e = resp->add_entries();
    e->set_key("abc");
    e->set_kernels(2);
    return grpc::Status::OK;
  };
  service.get = [](const v1::GetEntryRequest& req, v1::CompileResponse* resp) {
    if (req.key() != "abc") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry " + req.key());
    }
    resp->set_source(v1::CompileResponse::MEMORY);
    resp->set_key(req.key());
    *resp->mutable_bundle() = MakeBundle(req.key(), 2);
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));

  StatusOr<v1::StatsResponse> stats = client.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->version(), "0.1.0");
  EXPECT_EQ(stats->hits_memory(), 12u);
  EXPECT_EQ(stats->entries(), 3u);

  StatusOr<v1::ListEntriesResponse> list = client.ListEntries(7);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(seen_limit.load(), 7u);
  ASSERT_EQ(list->entries_size(), 1);
  EXPECT_EQ(list->entries(0).key(), "abc");

  StatusOr<v1::CompileResponse> got = client.GetEntry("abc");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->bundle().kernels_size(), 2);

  StatusOr<v1::CompileResponse> missing = client.GetEntry("zzz");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no entry zzz"), std::string::npos)
      << missing.status().ToString();
}

TEST(ClientAdmin, ErrorsMapToStatusCodes) {
  ScriptedService service;  // nothing scripted: every admin call is UNIMPLEMENTED
  service.list = [](const v1::ListEntriesRequest&, v1::ListEntriesResponse*) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not yours");
  };
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  StatusOr<v1::StatsResponse> stats = client.Stats();
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kUnimplemented);
  StatusOr<v1::ListEntriesResponse> list = client.ListEntries(0);
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(list.status().message().find("PERMISSION_DENIED"), std::string::npos)
      << list.status().ToString();
  EXPECT_NE(list.status().message().find("not yours"), std::string::npos);

  std::string dir = MakeTempDir();
  Client dead(OptionsFor("unix://" + dir + "/nobody.sock"));
  StatusOr<v1::StatsResponse> unreachable = dead.Stats();
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable);
  std::filesystem::remove_all(dir);
}

TEST(ClientLargeBundle, FiveMebibytePtxGoesThrough) {
  constexpr size_t kPtxBytes = size_t{5} << 20;
  ScriptedService service;
  service.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    resp->set_source(v1::CompileResponse::COMPILED);
    resp->set_key("big");
    *resp->mutable_bundle() = MakeBundle("big", 1, kPtxBytes);
    return grpc::Status::OK;
  };
  ScriptedServer server(&service);
  // The default receive limit, with a deadline that a sanitizer build's slower parsing of
  // 5 MiB also meets.
  ClientOptions o = OptionsFor(server.address());
  o.compile_deadline = milliseconds(120000);
  Client client(o);
  Result r = client.Compile(HloRequest("big"));
  ASSERT_EQ(r.outcome, Outcome::kCompiled) << r.reason;
  ASSERT_EQ(r.bundle->kernels_size(), 1);
  EXPECT_EQ(r.bundle->kernels(0).ptx().size(), kPtxBytes);
}

TEST(ClientThreads, ConcurrentCallsFromManyThreads) {
  ScriptedService service;
  service.compile = Answer(v1::CompileResponse::COMPILED);
  ScriptedServer server(&service);
  Client client(OptionsFor(server.address()));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Result r = client.Compile(HloRequest("t" + std::to_string((t + i) % 5)));
        if (r.ok()) ok++;
        client.RecordInvocations(r.key, 1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok.load(), 160);
  // Five distinct requests; racing first calls may each reach the daemon, later ones not.
  EXPECT_GE(service.compile_calls.load(), 5);
  EXPECT_LE(service.compile_calls.load(), 5 * 8);
}

TEST(ClientOutcome, Names) {
  EXPECT_STREQ(OutcomeName(Outcome::kLocal), "hit_local");
  EXPECT_STREQ(OutcomeName(Outcome::kMemory), "hit_memory");
  EXPECT_STREQ(OutcomeName(Outcome::kDisk), "hit_disk");
  EXPECT_STREQ(OutcomeName(Outcome::kCluster), "hit_cluster");
  EXPECT_STREQ(OutcomeName(Outcome::kCompiled), "compiled");
  EXPECT_STREQ(OutcomeName(Outcome::kFallback), "fallback");
}

}  // namespace
}  // namespace stitch::client
