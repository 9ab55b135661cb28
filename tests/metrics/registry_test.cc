#include "stitch/metrics/registry.h"

#include <gtest/gtest.h>

#include <clocale>
#include <cmath>
#include <cstdio>
#include <limits>
#include <locale>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace stitch::metrics {
namespace {

TEST(CounterTest, IncrementsAndIgnoresNegativeAndNaN) {
  Counter counter;
  EXPECT_EQ(counter.Value(), 0.0);
  counter.Increment();
  counter.Increment(2.5);
  EXPECT_EQ(counter.Value(), 3.5);
  counter.Increment(-10);
  counter.Increment(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(counter.Value(), 3.5);
}

TEST(GaugeTest, SetIncrementDecrement) {
  Gauge gauge;
  gauge.Set(10);
  gauge.Increment();
  gauge.Increment(4.5);
  gauge.Decrement(20);
  EXPECT_EQ(gauge.Value(), -4.5);
  gauge.Decrement();
  EXPECT_EQ(gauge.Value(), -5.5);
  gauge.Set(0.25);
  EXPECT_EQ(gauge.Value(), 0.25);
}

TEST(HistogramTest, BoundsAreInclusiveAndCumulative) {
  Histogram histogram({1, 2, 5});
  for (double v : {0.5, 1.0, 1.0000001, 2.0, 3.0, 5.0, 7.0, -1.0}) histogram.Observe(v);
  const Histogram::Snapshot s = histogram.Collect();
  EXPECT_EQ(s.bounds, (std::vector<double>{1, 2, 5}));
  // le=1: 0.5, 1, -1; le=2: + 1.0000001, 2; le=5: + 3, 5; +Inf: + 7.
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{3, 5, 7, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_EQ(s.count, s.cumulative.back());
  EXPECT_DOUBLE_EQ(s.sum, 0.5 + 1.0 + 1.0000001 + 2.0 + 3.0 + 5.0 + 7.0 - 1.0);
}

TEST(HistogramTest, NaNAndInfinitiesGoToTheirBuckets) {
  Histogram histogram({0});
  histogram.Observe(-std::numeric_limits<double>::infinity());
  histogram.Observe(std::numeric_limits<double>::infinity());
  histogram.Observe(std::numeric_limits<double>::quiet_NaN());
  const Histogram::Snapshot s = histogram.Collect();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(s.count, 3u);
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(HistogramTest, ManyObservationsNonDecreasing) {
  Histogram histogram(ExponentialBuckets(0.001, 2, 12));
  double sum = 0;
  for (int i = 0; i < 1000; ++i) {
    const double v = static_cast<double>((i * 7919) % 5000) / 1000.0;  // 0 .. 4.999
    histogram.Observe(v);
    sum += v;
  }
  const Histogram::Snapshot s = histogram.Collect();
  ASSERT_EQ(s.cumulative.size(), 13u);
  for (size_t i = 1; i < s.cumulative.size(); ++i) {
    EXPECT_LE(s.cumulative[i - 1], s.cumulative[i]) << "bucket " << i;
  }
  EXPECT_EQ(s.cumulative.back(), 1000u);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_NEAR(s.sum, sum, 1e-9);
}

TEST(ExponentialBucketsTest, Values) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  const std::vector<double> b = ExponentialBuckets(0.005, 10, 3);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_DOUBLE_EQ(b[0], 0.005);
  EXPECT_DOUBLE_EQ(b[1], 0.05);
  EXPECT_DOUBLE_EQ(b[2], 0.5);
  EXPECT_EQ(ExponentialBuckets(3, 1.5, 1), (std::vector<double>{3}));
}

TEST(RegistryTest, SameNameAndTypeReturnsTheSameFamily) {
  Registry registry;
  auto& a = registry.AddCounter("x_total", "X.");
  auto& b = registry.AddCounter("x_total", "X again.");
  EXPECT_EQ(&a, &b);
  auto& h1 = registry.AddHistogram("h_seconds", "H.", {1, 2});
  auto& h2 = registry.AddHistogram("h_seconds", "H.", {1, 2});
  EXPECT_EQ(&h1, &h2);
  EXPECT_EQ(&a.Add({{"k", "v"}}), &a.Add({{"k", "v"}}));
  EXPECT_NE(&a.Add({{"k", "v"}}), &a.Add({{"k", "w"}}));
}

// The whole output of a small registry, byte for byte.
TEST(RegistryTest, SerializesExactText) {
  Registry registry;
  auto& requests = registry.AddCounter("stitch_requests_total", "Requests by method.");
  requests.Add({{"method", "Lookup"}, {"result", "hit"}}).Increment(3);
  requests.Add({{"result", "miss"}, {"method", "Compile"}}).Increment();
  registry.AddGauge("stitch_cache_bytes", "Bytes in the cache.").Add().Set(1234567.5);
  auto& latency =
      registry.AddHistogram("stitch_latency_seconds", "Latency.", {0.005, 0.25, 1, 1e6});
  Histogram& compile = latency.Add({{"op", "compile"}});
  for (double v : {0.00390625, 0.25, 0.5, 4.0}) compile.Observe(v);
  Histogram& unlabeled = registry.AddHistogram("stitch_size_bytes", "Sizes.", {}).Add();
  unlabeled.Observe(2);
  registry.AddGauge("stitch_empty", "No children yet.");
  auto& special = registry.AddGauge("stitch_special", "Special values.");
  special.Add({{"v", "nan"}}).Set(std::numeric_limits<double>::quiet_NaN());
  special.Add({{"v", "neg"}}).Set(-std::numeric_limits<double>::infinity());
  special.Add({{"v", "pos"}}).Set(std::numeric_limits<double>::infinity());
  special.Add({{"v", "small"}}).Set(0.001);
  special.Add({{"v", "zero"}}).Set(-0.0);

  const std::string expected =
      "# HELP stitch_requests_total Requests by method.\n"
      "# TYPE stitch_requests_total counter\n"
      "stitch_requests_total{method=\"Compile\",result=\"miss\"} 1\n"
      "stitch_requests_total{method=\"Lookup\",result=\"hit\"} 3\n"
      "# HELP stitch_cache_bytes Bytes in the cache.\n"
      "# TYPE stitch_cache_bytes gauge\n"
      "stitch_cache_bytes 1234567.5\n"
      "# HELP stitch_latency_seconds Latency.\n"
      "# TYPE stitch_latency_seconds histogram\n"
      "stitch_latency_seconds_bucket{op=\"compile\",le=\"0.005\"} 1\n"
      "stitch_latency_seconds_bucket{op=\"compile\",le=\"0.25\"} 2\n"
      "stitch_latency_seconds_bucket{op=\"compile\",le=\"1\"} 3\n"
      "stitch_latency_seconds_bucket{op=\"compile\",le=\"1e+06\"} 4\n"
      "stitch_latency_seconds_bucket{op=\"compile\",le=\"+Inf\"} 4\n"
      "stitch_latency_seconds_sum{op=\"compile\"} 4.75390625\n"
      "stitch_latency_seconds_count{op=\"compile\"} 4\n"
      "# HELP stitch_size_bytes Sizes.\n"
      "# TYPE stitch_size_bytes histogram\n"
      "stitch_size_bytes_bucket{le=\"+Inf\"} 1\n"
      "stitch_size_bytes_sum 2\n"
      "stitch_size_bytes_count 1\n"
      "# HELP stitch_empty No children yet.\n"
      "# TYPE stitch_empty gauge\n"
      "# HELP stitch_special Special values.\n"
      "# TYPE stitch_special gauge\n"
      "stitch_special{v=\"nan\"} NaN\n"
      "stitch_special{v=\"neg\"} -Inf\n"
      "stitch_special{v=\"pos\"} +Inf\n"
      "stitch_special{v=\"small\"} 0.001\n"
      "stitch_special{v=\"zero\"} -0\n";
  EXPECT_EQ(registry.Serialize(), expected);
}

TEST(RegistryTest, EscapesHelpAndLabelValues) {
  Registry registry;
  registry.AddGauge("g", "a \\ backslash,\na newline and a \"quote\"")
      .Add({{"path", "C:\\dir\n\"x\""}})
      .Set(1);
  EXPECT_EQ(registry.Serialize(),
            "# HELP g a \\\\ backslash,\\na newline and a \"quote\"\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1\n");
}

TEST(RegistryTest, CollectHooksRunFirstInOrder) {
  Registry registry;
  Gauge& gauge = registry.AddGauge("refreshed", "Set by a hook.").Add();
  std::vector<int> order;
  registry.AddCollectHook([&] {
    order.push_back(1);
    gauge.Set(41);
  });
  registry.AddCollectHook([&] {
    order.push_back(2);
    gauge.Increment();
  });
  const std::string text = registry.Serialize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  // The hooks' values are in this very scrape, so they ran before the families were read.
  EXPECT_NE(text.find("\nrefreshed 42\n"), std::string::npos) << text;
  registry.Serialize();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 1, 2}));
}

std::string SerializeSample() {
  Registry registry;
  registry.AddGauge("big", "A big value.").Add({{"x", "1,5"}}).Set(1234567.5);
  registry.AddGauge("small", "A small value.").Add().Set(0.001);
  registry.AddGauge("tiny", "A tiny value.").Add().Set(1.5e-12);
  registry.AddCounter("c_total", "A counter.").Add().Increment(98765.25);
  Histogram& h = registry.AddHistogram("h_seconds", "A histogram.", {0.005, 0.5, 2.5}).Add();
  h.Observe(0.001);
  h.Observe(1.25);
  return registry.Serialize();
}

// A locale whose decimal separator is a comma must not leak into the format.
TEST(RegistryTest, OutputIsLocaleIndependent) {
  ASSERT_NE(std::setlocale(LC_ALL, "C"), nullptr);
  std::locale::global(std::locale::classic());
  const std::string in_c = SerializeSample();
  EXPECT_NE(in_c.find("big{x=\"1,5\"} 1234567.5\n"), std::string::npos) << in_c;
  EXPECT_NE(in_c.find("small 0.001\n"), std::string::npos) << in_c;
  EXPECT_NE(in_c.find("le=\"0.005\""), std::string::npos) << in_c;
  EXPECT_NE(in_c.find("c_total 98765.25\n"), std::string::npos) << in_c;

  if (std::setlocale(LC_ALL, "de_DE.UTF-8") == nullptr) {
    FAIL() << "the de_DE.UTF-8 locale is missing; run scripts/setup to generate it";
  }
  try {
    std::locale::global(std::locale("de_DE.UTF-8"));
  } catch (const std::runtime_error& e) {
    std::setlocale(LC_ALL, "C");
    FAIL() << "the de_DE.UTF-8 locale is missing (" << e.what()
           << "); run scripts/setup to generate it";
  }
  // The locale must really be in force, or this test proves nothing.
  char probe[16];
  std::snprintf(probe, sizeof(probe), "%.1f", 0.5);
  EXPECT_STREQ(probe, "0,5");
  const std::string in_de = SerializeSample();
  std::setlocale(LC_ALL, "C");
  std::locale::global(std::locale::classic());
  EXPECT_EQ(in_de, in_c);
}

TEST(RegistryTest, ConcurrentUpdatesSumExactly) {
  Registry registry;
  auto& counters = registry.AddCounter("ops_total", "Ops.");
  Gauge& gauge = registry.AddGauge("level", "Level.").Add();
  auto& histograms = registry.AddHistogram("op_seconds", "Op time.", {0.5, 1.5, 2.5});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50000;
  std::atomic<bool> done{false};
  std::atomic<int> bad_snapshots{0};
  // A concurrent reader: every snapshot must be self-consistent.
  std::thread reader([&] {
    Histogram& h = histograms.Add({{"kind", "shared"}});
    while (!done.load()) {
      const Histogram::Snapshot s = h.Collect();
      bool ok = s.count == s.cumulative.back();
      for (size_t i = 1; i < s.cumulative.size(); ++i)
        ok = ok && s.cumulative[i - 1] <= s.cumulative[i];
      if (!ok) bad_snapshots.fetch_add(1);
      registry.Serialize();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Children created concurrently as well as updated concurrently.
      Counter& counter = counters.Add({{"kind", "shared"}});
      Histogram& histogram = histograms.Add({{"kind", "shared"}});
      for (int i = 0; i < kPerThread; ++i) {
        counter.Increment();
        gauge.Increment(2);
        gauge.Decrement();
        histogram.Observe(static_cast<double>((i + t) % 3));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  done.store(true);
  reader.join();

  constexpr double kTotal = double{kThreads} * kPerThread;
  EXPECT_EQ(counters.Add({{"kind", "shared"}}).Value(), kTotal);
  EXPECT_EQ(gauge.Value(), kTotal);
  const Histogram::Snapshot s = histograms.Add({{"kind", "shared"}}).Collect();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kTotal));
  EXPECT_EQ(s.cumulative.back(), s.count);
  // Every value is 0, 1 or 2, each a third of the time up to rounding per thread.
  uint64_t expected_zero = 0, expected_one = 0;
  double expected_sum = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const int v = (i + t) % 3;
      expected_zero += v == 0;
      expected_one += v == 1;
      expected_sum += v;
    }
  }
  EXPECT_EQ(s.cumulative[0], expected_zero);
  EXPECT_EQ(s.cumulative[1], expected_zero + expected_one);
  EXPECT_EQ(s.sum, expected_sum);
  EXPECT_EQ(bad_snapshots.load(), 0);
}

class RegistryDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(RegistryDeathTest, InvalidMetricName) {
  Registry registry;
  EXPECT_DEATH(registry.AddCounter("1st_total", "Starts with a digit."),
               "invalid metric name \"1st_total\"");
  EXPECT_DEATH(registry.AddGauge("has-dash", "Dash."), "invalid metric name");
  EXPECT_DEATH(registry.AddGauge("", "Empty."), "invalid metric name");
}

TEST_F(RegistryDeathTest, InvalidLabelNames) {
  Registry registry;
  auto& gauge = registry.AddGauge("g", "G.");
  EXPECT_DEATH(gauge.Add({{"a:b", "x"}}), "invalid label name \"a:b\"");
  EXPECT_DEATH(gauge.Add({{"__name", "x"}}), "reserved");
  auto& histogram = registry.AddHistogram("h", "H.", {1});
  EXPECT_DEATH(histogram.Add({{"le", "1"}}), "\"le\" is reserved");
}

TEST(RegistryTest, LeIsAllowedOutsideHistograms) {
  Registry registry;
  registry.AddGauge("g", "G.").Add({{"le", "x"}}).Set(1);
  EXPECT_NE(registry.Serialize().find("g{le=\"x\"} 1\n"), std::string::npos);
}

TEST_F(RegistryDeathTest, SameNameOtherType) {
  Registry registry;
  registry.AddCounter("thing", "A counter.");
  EXPECT_DEATH(registry.AddGauge("thing", "A gauge."), "registered as gauge, already a counter");
  registry.AddHistogram("lat", "Latency.", {1});
  EXPECT_DEATH(registry.AddCounter("lat_count", "Clash."), "collides");
  EXPECT_DEATH(registry.AddHistogram("lat", "Latency.", {2}), "different buckets");
}

TEST_F(RegistryDeathTest, BadBuckets) {
  Registry registry;
  EXPECT_DEATH(registry.AddHistogram("h1", "H.", {1, 1}), "strictly increasing");
  EXPECT_DEATH(registry.AddHistogram("h2", "H.", {2, 1}), "strictly increasing");
  EXPECT_DEATH(registry.AddHistogram("h3", "H.", {1, std::numeric_limits<double>::infinity()}),
               "not finite");
  EXPECT_DEATH(registry.AddHistogram("h4", "H.", {std::numeric_limits<double>::quiet_NaN()}),
               "not finite");
  EXPECT_DEATH((void)Histogram(std::vector<double>{3, 2}), "strictly increasing");
  EXPECT_DEATH(ExponentialBuckets(0, 2, 3), "start");
  EXPECT_DEATH(ExponentialBuckets(1, 1, 3), "factor");
  EXPECT_DEATH(ExponentialBuckets(1, 2, 0), "count");
}

}  // namespace
}  // namespace stitch::metrics
