// fork() and the client. gRPC 1.51's process-wide state (epoll set, timer and poller
// threads, internal locks) does not survive fork(): a child of a process that had used gRPC
// was seen to block inside gRPC, crash in absl on a condition variable a parent thread had
// waited on, and make its parent abort. So a process forked from one that used the client
// never touches gRPC: it answers from the in-process cache it inherited and falls back at
// once otherwise. A process forked before the first use is a fresh gRPC process and is
// served normally.
//
// The daemon is a scripted server in a separate process, and the "forked before first use"
// child is forked too, both before this process touches gRPC.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "client/scripted_server.h"
#include "stitch/client/client.h"

namespace stitch::client {
namespace {

using stitch::testing::Answer;
using stitch::testing::ForkedServer;
using stitch::testing::HloRequest;
using stitch::testing::ScriptedService;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kOk = 0;
constexpr int kHung = -1;     // did not exit in time
constexpr int kCrashed = -3;  // died on a signal
// The scripted daemon answers at once, but a sanitizer build on a busy machine can take
// longer than the default 50 ms; these tests are about fork, not deadlines.
constexpr milliseconds kLookupDeadline{2000};

// Exit statuses of a child are the number of the first check that failed, or kOk.
int WaitChild(pid_t pid, std::chrono::seconds limit) {
  auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return kHung;
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kCrashed;
}

// Runs `body` in a forked child and returns its exit status (see WaitChild).
int RunInChild(const std::function<int()>& body,
               std::chrono::seconds limit = std::chrono::seconds(10)) {
  pid_t pid = ::fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    int code = 100;
    try {
      code = body();
    } catch (...) {
      code = 101;
    }
    // Skip exit handlers and static destructors: they belong to the parent.
    ::_exit(code);
  }
  return WaitChild(pid, limit);
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool IsForkFallback(const Result& r) {
  return r.outcome == Outcome::kFallback && r.bundle == nullptr &&
         StartsWith(r.reason, "UNAVAILABLE: this process was forked");
}

template <typename F>
milliseconds Elapsed(F&& f) {
  auto start = Clock::now();
  f();
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// In a child of a process that used the client: `client`'s inherited bundles are served,
// anything else falls back at once, and no call reaches gRPC. Returns the first failed
// check's number.
int CheckChildOfUsedClient(Client& client, const v1::CompileRequest& inherited,
                           const std::string& fresh_name) {
  Result local = client.Compile(inherited);
  if (local.outcome != Outcome::kLocal || local.bundle == nullptr || local.key.empty()) return 10;
  if (client.Lookup(inherited).outcome != Outcome::kLocal) return 11;
  Result compiled, looked, async;
  milliseconds t = Elapsed([&] {
    compiled = client.Compile(HloRequest(fresh_name));
    looked = client.Lookup(HloRequest(fresh_name + "_lookup"));
    async = client.CompileAsync(HloRequest(fresh_name + "_async")).get();
  });
  if (!IsForkFallback(compiled) || !IsForkFallback(looked) || !IsForkFallback(async)) return 12;
  // Well under the deadlines a call that reached gRPC would wait for.
  if (t > kLookupDeadline / 2) return 13;
  int runs = 0;
  client.CompileAsync(HloRequest(fresh_name + "_cb"), [&](Result r) {
    if (IsForkFallback(r)) ++runs;
  });
  if (runs != 1) return 14;  // inline, exactly once
  StatusOr<v1::StatsResponse> stats = client.Stats();
  if (stats.ok() || stats.status().code() != StatusCode::kUnavailable) return 15;
  client.RecordInvocations("child_key", 3);
  if (client.FlushUsage().ok()) return 16;
  // A Client made in the child is in the same process.
  ClientOptions o;
  o.address = "unix:///nonexistent/never-used.sock";
  Client fresh(o);
  if (!IsForkFallback(fresh.Compile(HloRequest(fresh_name + "_fresh")))) return 17;
  return kOk;
}

class ClientForkTest : public ::testing::Test {
 protected:
  // Once per process, not per --gtest_repeat iteration: both processes must be forked
  // before this process first uses gRPC.
  static void SetUpTestSuite() {
    if (server_ != nullptr) return;
    server_ = new ForkedServer([](ScriptedService& s) {
      s.compile = [](const v1::CompileRequest& req, v1::CompileResponse* resp) {
        if (req.hlo_text().find("slow") != std::string::npos) {
          std::this_thread::sleep_for(milliseconds(300));
        }
        return Answer(v1::CompileResponse::COMPILED)(req, resp);
      };
      s.lookup = Answer(v1::CompileResponse::MEMORY);
    });
    StartFreshChild();
    std::atexit([] {
      if (fresh_pid_ > 0) {
        ::kill(fresh_pid_, SIGKILL);
        ::waitpid(fresh_pid_, nullptr, 0);
      }
      delete server_;
    });
  }
  void SetUp() override { ASSERT_TRUE(server_->ready()); }

  static ClientOptions Options() {
    ClientOptions o;
    o.address = server_->address();
    o.lookup_deadline = kLookupDeadline;
    return o;
  }
  static v1::StatsResponse Counts(Client& client) {
    StatusOr<v1::StatsResponse> s = client.Stats();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::StatsResponse();
  }

  // Forks, before this process uses gRPC, a child that waits for a byte on a pipe and then
  // uses a client of its own.
  static void StartFreshChild() {
    int go[2];
    if (::pipe(go) != 0) return;
    std::string address = server_->address();
    pid_t parent = ::getpid();
    fresh_pid_ = ::fork();
    if (fresh_pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);
      ::close(go[1]);
      char byte = 0;
      if (::read(go[0], &byte, 1) != 1) ::_exit(90);
      ClientOptions o;
      o.address = address;
      o.lookup_deadline = kLookupDeadline;
      Client client(o);
      if (client.Compile(HloRequest("fresh")).outcome != Outcome::kCompiled) ::_exit(20);
      if (client.Lookup(HloRequest("fresh_lookup")).outcome != Outcome::kMemory) ::_exit(21);
      if (client.CompileAsync(HloRequest("fresh_async")).get().outcome != Outcome::kCompiled) {
        ::_exit(22);
      }
      client.RecordInvocations("fresh_key", 2);
      if (!client.FlushUsage().ok()) ::_exit(23);
      // It is now a process that used the client: its own children follow the rule.
      int grandchild = RunInChild(
          [&] { return CheckChildOfUsedClient(client, HloRequest("fresh"), "fresh_gc"); });
      ::_exit(grandchild == kOk ? kOk : 24);
    }
    ::close(go[0]);
    go_fd_ = go[1];
  }

  static ForkedServer* server_;
  static pid_t fresh_pid_;
  static int go_fd_;
};

ForkedServer* ClientForkTest::server_ = nullptr;
pid_t ClientForkTest::fresh_pid_ = -1;
int ClientForkTest::go_fd_ = -1;

TEST_F(ClientForkTest, AProcessForkedBeforeFirstUseIsServed) {
  if (go_fd_ < 0) GTEST_SKIP() << "the process forked before first use served an earlier run";
  ASSERT_GT(fresh_pid_, 0);
  Client parent(Options());
  v1::StatsResponse before = Counts(parent);
  char byte = 1;
  ASSERT_EQ(::write(go_fd_, &byte, 1), 1);
  ::close(go_fd_);
  go_fd_ = -1;
  int code = WaitChild(fresh_pid_, std::chrono::seconds(20));
  fresh_pid_ = -1;
  EXPECT_EQ(code, kOk);
  v1::StatsResponse after = Counts(parent);
  EXPECT_EQ(after.compiles() - before.compiles(), 2u);  // fresh, fresh_async
  EXPECT_EQ(after.misses() - before.misses(), 1u);      // fresh_lookup
  EXPECT_EQ(after.invocations_reported() - before.invocations_reported(), 2u);
}

TEST_F(ClientForkTest, ChildOfAUsedClientServesInheritedBundlesAndFallsBackOtherwise) {
  Client client(Options());
  // Every kind of call first, so that the parent has a live channel and gRPC threads.
  ASSERT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kCompiled);
  ASSERT_EQ(client.CompileAsync(HloRequest("parent_async")).get().outcome, Outcome::kCompiled);
  ASSERT_EQ(client.Lookup(HloRequest("parent_lookup")).outcome, Outcome::kMemory);
  v1::StatsResponse before = Counts(client);

  EXPECT_EQ(RunInChild([&] { return CheckChildOfUsedClient(client, HloRequest("parent"), "c"); }),
            kOk);

  // Nothing reached the daemon from the child.
  v1::StatsResponse after = Counts(client);
  EXPECT_EQ(after.compiles(), before.compiles());
  EXPECT_EQ(after.misses(), before.misses());
  EXPECT_EQ(after.invocations_reported(), before.invocations_reported());

  // The parent's client is unaffected.
  EXPECT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kLocal);
  EXPECT_EQ(client.Compile(HloRequest("parent_after")).outcome, Outcome::kCompiled);
  EXPECT_EQ(client.CompileAsync(HloRequest("parent_async_after")).get().outcome,
            Outcome::kCompiled);
  EXPECT_EQ(client.Lookup(HloRequest("parent_lookup_after")).outcome, Outcome::kMemory);
}

TEST_F(ClientForkTest, ManyChildrenAndGrandchildren) {
  Client client(Options());
  ASSERT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kCompiled);
  for (int i = 0; i < 20; ++i) {
    std::string n = std::to_string(i);
    int code = RunInChild([&] {
      int own = CheckChildOfUsedClient(client, HloRequest("parent"), "many" + n);
      if (own != kOk) return own;
      return RunInChild(
          [&] { return CheckChildOfUsedClient(client, HloRequest("parent"), "g" + n); });
    });
    EXPECT_EQ(code, kOk) << "child " << i;
    // The parent keeps using its channel between forks.
    EXPECT_EQ(client.Lookup(HloRequest("between" + n)).outcome, Outcome::kMemory);
  }
}

// The parent has asynchronous calls in flight when it forks: they finish, once each, in the
// parent; the child neither sees them nor waits for them when it destroys the client.
TEST_F(ClientForkTest, ForkWithAsynchronousCallsInFlight) {
  auto client = std::make_unique<Client>(Options());
  ASSERT_EQ(client->Compile(HloRequest("parent")).outcome, Outcome::kCompiled);
  constexpr int kCalls = 4;
  std::atomic<int> done{0};
  std::atomic<int> compiled{0};
  for (int i = 0; i < kCalls; ++i) {
    client->CompileAsync(HloRequest("slow" + std::to_string(i)), [&](Result r) {
      if (r.outcome == Outcome::kCompiled) ++compiled;
      ++done;
    });
  }
  std::this_thread::sleep_for(milliseconds(50));
  int code = RunInChild([&] {
    if (CheckChildOfUsedClient(*client, HloRequest("parent"), "inflight") != kOk) return 30;
    milliseconds t = Elapsed([&] { client.reset(); });
    if (t > milliseconds(50)) return 31;  // it waited for the parent's calls
    return done.load() == 0 ? kOk : 32;
  });
  EXPECT_EQ(code, kOk);
  client.reset();  // waits for the calls
  EXPECT_EQ(done.load(), kCalls);
  EXPECT_EQ(compiled.load(), kCalls);
}

// A thread that holds the client's locks most of the time (local hits and usage counts,
// no RPCs) while the process forks: no child may inherit a lock held by that thread.
TEST_F(ClientForkTest, ForkWhileAnotherThreadHoldsTheClientsLocks) {
  Client client(Options());
  ASSERT_EQ(client.Compile(HloRequest("hot")).outcome, Outcome::kCompiled);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> spins{0};
  // Hashing a long key happens under the usage lock, so the lock is held nearly always.
  const std::string long_key(256 << 10, 'k');
  std::thread hammer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      for (int i = 0; i < 16; ++i) client.RecordInvocations(long_key, 1);
      (void)client.Compile(HloRequest("hot"));
      spins.fetch_add(1, std::memory_order_relaxed);
    }
  });
  while (spins.load() < 10) std::this_thread::yield();
  for (int i = 0; i < 20; ++i) {
    int code = RunInChild([&] {
      client.RecordInvocations("child_key", 1);
      return client.Compile(HloRequest("hot")).outcome == Outcome::kLocal ? kOk : 40;
    });
    EXPECT_EQ(code, kOk) << "child " << i << " (-1: it hung on an inherited lock)";
  }
  stop = true;
  hammer.join();
}

}  // namespace
}  // namespace stitch::client
