// Checks the endpoint's output with Prometheus's own parser and linter: `promtool check
// metrics` rejects what the server would scrape badly, and also lint problems (counters
// without _total, missing HELP), which the metrics here are named to avoid.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "stitch/metrics/http_server.h"
#include "stitch/metrics/process_metrics.h"
#include "stitch/metrics/registry.h"

namespace stitch::metrics {
namespace {

struct CommandResult {
  int exit_status = -1;
  std::string output;  // stdout and stderr
};

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = ::pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool HaveProgram(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "stitch_promtool_" + std::to_string(::getpid()) + "_" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

// Runs promtool on `path`; returns its result.
CommandResult PromtoolCheck(const std::string& path) {
  return RunCommand("promtool check metrics < '" + path + "'");
}

class PromtoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(HaveProgram("promtool"))
        << "promtool is not installed (Debian package `prometheus`); run scripts/setup";
    ASSERT_TRUE(HaveProgram("curl")) << "curl is not installed; run scripts/setup";
  }
};

TEST_F(PromtoolTest, EndpointOutputPassesCheckMetrics) {
  Registry registry;
  auto& requests = registry.AddCounter("stitch_test_requests_total", "Requests by method.");
  requests.Add({{"method", "Lookup"}, {"result", "hit_memory"}}).Increment(12);
  requests.Add({{"method", "Compile"}, {"result", "error"}}).Increment(0.5);
  requests.Add({{"method", "Compile"}, {"result", "quote\"back\\slash\nnewline"}}).Increment();
  auto& bytes = registry.AddGauge("stitch_test_cache_bytes",
                                  "Bytes held by a tier.\nSecond line with a \\ backslash.");
  bytes.Add({{"tier", "memory"}}).Set(1234567.5);
  bytes.Add({{"tier", "disk"}}).Set(0.001);
  bytes.Add({{"tier", "ünïcode ✓"}}).Set(-3);
  registry.AddGauge("stitch_test_special", "Special values.")
      .Add({{"v", "nan"}})
      .Set(std::numeric_limits<double>::quiet_NaN());
  registry.AddGauge("stitch_test_special", "Special values.")
      .Add({{"v", "inf"}})
      .Set(std::numeric_limits<double>::infinity());
  registry.AddGauge("stitch_test_special", "Special values.")
      .Add({{"v", "neg_inf"}})
      .Set(-std::numeric_limits<double>::infinity());
  registry.AddGauge("stitch_test_unlabeled", "No labels.").Add().Set(42);
  auto& latency = registry.AddHistogram("stitch_test_duration_seconds", "Durations.",
                                        ExponentialBuckets(0.0005, 4, 8));
  for (double v : {0.0001, 0.0005, 0.003, 0.2, 1.5, 100.0}) {
    latency.Add({{"method", "Compile"}}).Observe(v);
  }
  latency.Add({{"method", "Lookup"}});  // a child with no observations
  registry.AddHistogram("stitch_test_size_bytes", "Sizes.", {1024, 1e6, 1e9}).Add().Observe(5e6);
  registry.AddCounter("stitch_test_unused_total", "A family with no children.");
  AddProcessMetrics(registry);

  auto server = HttpServer::Start({.address = "127.0.0.1", .port = 0}, registry, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  const std::string path = TempPath("metrics.txt");
  const std::string url = "http://127.0.0.1:" + std::to_string((*server)->port()) + "/metrics";
  const CommandResult curl = RunCommand("curl -s -f -o '" + path + "' '" + url + "'");
  ASSERT_EQ(curl.exit_status, 0) << "curl failed: " << curl.output;
  const std::string scraped = ReadFile(path);
  // The scrape is what the test means it to be: every type, escapes and process metrics.
  for (const char* expected :
       {"# TYPE stitch_test_requests_total counter\n", "# TYPE stitch_test_cache_bytes gauge\n",
        "# TYPE stitch_test_duration_seconds histogram\n",
        "result=\"quote\\\"back\\\\slash\\nnewline\"",
        "# HELP stitch_test_cache_bytes Bytes held by a tier.\\nSecond line with a \\\\ "
        "backslash.\n",
        "stitch_test_duration_seconds_bucket{method=\"Compile\",le=\"+Inf\"} 6\n",
        "stitch_test_duration_seconds_count{method=\"Lookup\"} 0\n", "process_cpu_seconds_total ",
        "process_open_fds ", "process_start_time_seconds "}) {
    EXPECT_NE(scraped.find(expected), std::string::npos) << expected << "\nin:\n" << scraped;
  }

  const CommandResult check = PromtoolCheck(path);
  EXPECT_EQ(check.exit_status, 0) << "promtool check metrics:\n"
                                  << check.output << "\non:\n"
                                  << scraped;
  EXPECT_EQ(check.output.find("error"), std::string::npos) << check.output;
  EXPECT_EQ(check.output, "") << check.output;
  std::remove(path.c_str());
}

// The check above only means something if promtool fails on what it should: a counter
// without the _total suffix is a lint problem, and a malformed line a parse error.
TEST_F(PromtoolTest, CheckIsStrict) {
  Registry registry;
  registry.AddCounter("stitch_test_requests", "Requests, badly named.").Add().Increment();
  const std::string path = TempPath("lint.txt");
  WriteFile(path, registry.Serialize());
  const CommandResult lint = PromtoolCheck(path);
  EXPECT_NE(lint.exit_status, 0) << lint.output;
  EXPECT_NE(lint.output.find("_total"), std::string::npos) << lint.output;

  WriteFile(path, registry.Serialize() + "stitch_test_requests{bad 1\n");
  const CommandResult parse = PromtoolCheck(path);
  EXPECT_NE(parse.exit_status, 0) << parse.output;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace stitch::metrics
