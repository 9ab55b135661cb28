#include "stitch/metrics/process_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "stitch/metrics/registry.h"

namespace stitch::metrics {
namespace {

// The value of the unlabeled sample `name` in `text`, if there is exactly one line for it.
std::optional<double> SampleValue(const std::string& text, const std::string& name) {
  const std::string prefix = "\n" + name + " ";
  const size_t pos = text.find(prefix);
  if (pos == std::string::npos || text.find(prefix, pos + 1) != std::string::npos) {
    return std::nullopt;
  }
  const size_t start = pos + prefix.size();
  const size_t end = text.find('\n', start);
  const std::string value = text.substr(start, end - start);
  if (value == "+Inf") return std::numeric_limits<double>::infinity();
  char* parse_end = nullptr;
  const double parsed = std::strtod(value.c_str(), &parse_end);
  if (parse_end != value.c_str() + value.size()) return std::nullopt;
  return parsed;
}

void BurnCpu(std::chrono::milliseconds cpu) {
  const std::clock_t start = std::clock();
  const std::clock_t ticks = cpu.count() * CLOCKS_PER_SEC / 1000;
  volatile double sink = 0;
  while (std::clock() - start < ticks) sink = sink + 1;
}

TEST(ProcessMetricsTest, ExportsPlausibleValues) {
  Registry registry;
  AddProcessMetrics(registry);
  BurnCpu(std::chrono::milliseconds(50));
  const std::string text = "\n" + registry.Serialize();

  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
  for (const char* gauge : {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                            "process_start_time_seconds", "process_open_fds", "process_max_fds"}) {
    EXPECT_NE(text.find("# TYPE " + std::string(gauge) + " gauge\n"), std::string::npos) << gauge;
  }

  const auto cpu = SampleValue(text, "process_cpu_seconds_total");
  const auto rss = SampleValue(text, "process_resident_memory_bytes");
  const auto vsize = SampleValue(text, "process_virtual_memory_bytes");
  const auto start = SampleValue(text, "process_start_time_seconds");
  const auto open_fds = SampleValue(text, "process_open_fds");
  const auto max_fds = SampleValue(text, "process_max_fds");
  ASSERT_TRUE(cpu && rss && vsize && start && open_fds && max_fds) << text;

  EXPECT_GE(*cpu, 0.03) << "50 ms of CPU were just spent";
  EXPECT_LT(*cpu, 3600.0);
  EXPECT_GT(*rss, 1024.0 * 1024.0);
  EXPECT_GE(*vsize, *rss);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(*start, now + 1);
  EXPECT_GE(*start, now - 24 * 3600);
  EXPECT_GE(*open_fds, 3);
  EXPECT_GE(*max_fds, *open_fds);
}

// Each scrape reads /proc afresh, through the collect hook.
TEST(ProcessMetricsTest, RefreshedAtEveryScrape) {
  Registry registry;
  AddProcessMetrics(registry);
  const auto before = SampleValue("\n" + registry.Serialize(), "process_open_fds");
  ASSERT_TRUE(before.has_value());
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) fds.push_back(::dup(2));
  const auto during = SampleValue("\n" + registry.Serialize(), "process_open_fds");
  for (int fd : fds) ::close(fd);
  const auto after = SampleValue("\n" + registry.Serialize(), "process_open_fds");
  ASSERT_TRUE(during.has_value() && after.has_value());
  EXPECT_EQ(*during, *before + 10);
  EXPECT_EQ(*after, *before);

  const auto cpu_before = SampleValue("\n" + registry.Serialize(), "process_cpu_seconds_total");
  BurnCpu(std::chrono::milliseconds(100));
  const auto cpu_after = SampleValue("\n" + registry.Serialize(), "process_cpu_seconds_total");
  ASSERT_TRUE(cpu_before && cpu_after);
  EXPECT_GE(*cpu_after - *cpu_before, 0.05);
}

}  // namespace
}  // namespace stitch::metrics
