// A client used before fork() keeps working in the child: the child makes its own channel
// and never touches the parent's gRPC objects. The daemon here is a scripted server in the
// parent process, which keeps serving while the child calls it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "client/scripted_server.h"
#include "stitch/client/client.h"

namespace stitch::client {
namespace {

using stitch::testing::Answer;
using stitch::testing::HloRequest;
using stitch::testing::ScriptedServer;
using stitch::testing::ScriptedService;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Runs `body` in a forked child and returns its exit status, or -1 when it did not exit
// normally within `limit` (a hang in the child is a failure, not a stuck test).
int RunInChild(const std::function<int()>& body, std::chrono::seconds limit) {
  pid_t pid = ::fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    int code = 100;
    try {
      code = body();
    } catch (...) {
      code = 101;
    }
    // Skip exit handlers and static destructors: they belong to the parent's gRPC.
    ::_exit(code);
  }
  auto deadline = Clock::now() + limit;
  int status = 0;
  while (true) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

ScriptedService::CompileFn SlowOn(const std::string& marker, ScriptedService::CompileFn inner) {
  return [marker, inner](const v1::CompileRequest& req, v1::CompileResponse* resp) {
    if (req.hlo_text().find(marker) != std::string::npos) {
      std::this_thread::sleep_for(milliseconds(500));
    }
    return inner(req, resp);
  };
}

class ClientForkTest : public ::testing::Test {
 protected:
  ClientForkTest() {
    service_.compile = SlowOn("slow", Answer(v1::CompileResponse::COMPILED));
    service_.lookup = SlowOn("slow", Answer(v1::CompileResponse::MEMORY));
  }
  ScriptedService service_;
  ScriptedServer server_{&service_};
};

// Exit codes of the child: 0 when everything held, otherwise the first check that failed.
enum ChildCheck {
  kOk = 0,
  kInheritedLocalHit = 10,
  kCompileInChild = 11,
  kLookupInChild = 12,
  kDeadlineInChild = 13,
  kAsyncInChild = 14,
  kFreshClientInChild = 15,
};

TEST_F(ClientForkTest, ChildOfAClientThatWasUsedCallsTheDaemonOnItsOwnChannel) {
  ClientOptions options;
  options.address = server_.address();
  options.lookup_deadline = milliseconds(100);
  Client client(options);
  // Use every kind of call in the parent first, so that it owns a live channel.
  ASSERT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kCompiled);
  ASSERT_EQ(client.CompileAsync(HloRequest("parent_async")).get().outcome, Outcome::kCompiled);
  ASSERT_EQ(service_.compile_calls.load(), 2);

  int code = RunInChild(
      [&]() -> int {
        // The parent's bundles came along in the in-process cache.
        if (client.Compile(HloRequest("parent")).outcome != Outcome::kLocal) {
          return kInheritedLocalHit;
        }
        Result compiled = client.Compile(HloRequest("child"));
        if (compiled.outcome != Outcome::kCompiled) return kCompileInChild;
        if (client.Lookup(HloRequest("child_lookup")).outcome != Outcome::kMemory) {
          return kLookupInChild;
        }
        // Deadlines still fire in the child.
        auto start = Clock::now();
        Result slow = client.Lookup(HloRequest("slow"));
        if (slow.reason.rfind("DEADLINE_EXCEEDED", 0) != 0 ||
            Clock::now() - start > milliseconds(400)) {
          return kDeadlineInChild;
        }
        std::future<Result> f = client.CompileAsync(HloRequest("child_async"));
        if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready ||
            f.get().outcome != Outcome::kCompiled) {
          return kAsyncInChild;
        }
        Client fresh(options);
        if (fresh.Compile(HloRequest("child_fresh")).outcome != Outcome::kCompiled) {
          return kFreshClientInChild;
        }
        return kOk;
      },
      std::chrono::seconds(20));
  EXPECT_EQ(code, kOk);

  // The child's calls reached the daemon (their counts live in this, the server's, process).
  EXPECT_EQ(service_.compile_calls.load(), 2 + 3);
  EXPECT_EQ(service_.lookup_calls.load(), 2);

  // The parent's client is unaffected.
  EXPECT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kLocal);
  EXPECT_EQ(client.Compile(HloRequest("parent_after")).outcome, Outcome::kCompiled);
  EXPECT_EQ(client.Lookup(HloRequest("parent_lookup")).outcome, Outcome::kMemory);
}

TEST_F(ClientForkTest, ManyChildrenInARow) {
  ClientOptions options;
  options.address = server_.address();
  Client client(options);
  ASSERT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kCompiled);
  constexpr int kChildren = 10;
  for (int i = 0; i < kChildren; ++i) {
    int code = RunInChild(
        [&]() -> int {
          Result r = client.Compile(HloRequest("child" + std::to_string(i)));
          return r.outcome == Outcome::kCompiled ? kOk : kCompileInChild;
        },
        std::chrono::seconds(20));
    EXPECT_EQ(code, kOk) << "child " << i;
    // The parent keeps using its channel between forks.
    EXPECT_EQ(client.Lookup(HloRequest("between" + std::to_string(i))).outcome, Outcome::kMemory);
  }
  EXPECT_EQ(service_.compile_calls.load(), 1 + kChildren);
}

TEST_F(ClientForkTest, GrandchildToo) {
  ClientOptions options;
  options.address = server_.address();
  Client client(options);
  ASSERT_EQ(client.Compile(HloRequest("parent")).outcome, Outcome::kCompiled);
  int code = RunInChild(
      [&]() -> int {
        if (client.Compile(HloRequest("child")).outcome != Outcome::kCompiled) {
          return kCompileInChild;
        }
        return RunInChild(
            [&]() -> int {
              Result r = client.Compile(HloRequest("grandchild"));
              return r.outcome == Outcome::kCompiled ? kOk : kCompileInChild;
            },
            std::chrono::seconds(10));
      },
      std::chrono::seconds(20));
  EXPECT_EQ(code, kOk);
  EXPECT_EQ(service_.compile_calls.load(), 3);
}

}  // namespace
}  // namespace stitch::client
