// Kernel time (kernel_activity.h): the per-run sums of kernel records, and the runner's kernel
// time against the stand-in driver, which also stands in for CUPTI and puts a 1 us host gap
// before every launch that CUDA events count and kernel records do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench/fake_cuda_driver.h"
#include "gpu/gpu_runner.h"
#include "gpu/kernel_activity.h"
#include "support/random_graph.h"

namespace stitch::gpu::test {
namespace {

// `runs` runs of `kernels` launches each, one after another with gaps between them (which
// kernel time leaves out), their records shuffled as CUPTI may deliver them; `durations` gets
// each launch's microseconds by run and launch.
std::vector<KernelSpan> ShuffledRuns(std::mt19937_64& rng, int runs, int kernels,
                                     std::vector<std::vector<double>>& durations) {
  std::vector<KernelSpan> spans;
  durations.assign(static_cast<size_t>(runs), {});
  uint64_t clock = 1000;
  for (int r = 0; r < runs; ++r) {
    for (int k = 0; k < kernels; ++k) {
      clock += rng() % 5000;
      const uint64_t duration = 1 + rng() % 100000;
      spans.push_back({clock, clock + duration});
      durations[static_cast<size_t>(r)].push_back(duration / 1e3);
      clock += duration;
    }
  }
  std::shuffle(spans.begin(), spans.end(), rng);
  return spans;
}

// Each launch's own duration, by run and by its place in the plan (what gpu_bench --mappings
// reads one kernel of a plan by), and each run's sum of them (a plan's kernel time).
TEST(KernelMicrosecondsPerLaunchTest, KeepsEachLaunchInPlanOrderWhateverOrderTheRecordsCameIn) {
  const uint64_t seed = testing::RandomGraphBaseSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int runs = 5, kernels = 3;
  std::vector<std::vector<double>> want;
  const std::vector<KernelSpan> spans = ShuffledRuns(rng, runs, kernels, want);
  StatusOr<std::vector<std::vector<double>>> got =
      KernelMicrosecondsPerLaunch(spans, kernels, runs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want.size());
  const std::vector<double> per_run = KernelMicrosecondsPerRun(*got);
  ASSERT_EQ(per_run.size(), want.size());
  for (int r = 0; r < runs; ++r) {
    ASSERT_EQ((*got)[r].size(), want[r].size()) << "run " << r;
    double sum = 0;
    for (int k = 0; k < kernels; ++k) {
      EXPECT_DOUBLE_EQ((*got)[r][k], want[r][k]) << "run " << r << " kernel " << k;
      sum += want[r][k];
    }
    EXPECT_DOUBLE_EQ(per_run[r], sum) << "run " << r;
  }
  EXPECT_FALSE(KernelMicrosecondsPerLaunch(spans, kernels, runs + 1).ok());
}

TEST(KernelMicrosecondsPerLaunchTest, RefusesRecordsThatDoNotAddUp) {
  const std::vector<KernelSpan> five(5, KernelSpan{10, 20});
  StatusOr<std::vector<std::vector<double>>> short_by_one = KernelMicrosecondsPerLaunch(five, 2, 3);
  ASSERT_FALSE(short_by_one.ok());
  EXPECT_EQ(short_by_one.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(short_by_one.status().message().find("recorded 5 kernels, the 3 runs launched 6"),
            std::string::npos)
      << short_by_one.status().ToString();

  StatusOr<std::vector<std::vector<double>>> backwards =
      KernelMicrosecondsPerLaunch({{30, 20}}, 1, 1);
  ASSERT_FALSE(backwards.ok());
  EXPECT_EQ(backwards.status().code(), StatusCode::kInvalidArgument);
}

TEST(KernelActivityTest, AMissingLibrarySaysSo) {
  StatusOr<std::unique_ptr<KernelActivity>> a = OpenKernelActivity("/nonexistent/libcupti.so");
  ASSERT_FALSE(a.ok());
  // Unavailable, or refused where this process has loaded another CUPTI already.
  EXPECT_TRUE(a.status().code() == StatusCode::kUnavailable ||
              a.status().code() == StatusCode::kFailedPrecondition)
      << a.status().ToString();
  EXPECT_NE(a.status().message().find("/nonexistent/libcupti.so"), std::string::npos)
      << a.status().ToString();
}

// A plan of two kernels that do nothing, on `g`'s parameter x and output y.
struct TwoKernelPlan {
  Graph g;
  CompileResult compiled;
  // Each launch's duration on the stand-in: 2 us plus 1 ns per 64 threads.
  double kernel_us = 0;
};

CompiledKernel NopKernel(const std::string& name, std::vector<int> nodes, uint32_t blocks,
                         uint32_t threads) {
  CompiledKernel k;
  k.name = name;
  k.launch.grid = {blocks, 1, 1};
  k.launch.block = {threads, 1, 1};
  k.param_nodes = std::move(nodes);
  k.ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry " + name +
          "(\n  .param .u64 " + name + "_param_0,\n  .param .u64 " + name +
          "_param_1\n)\n{\n  ret;\n}\n";
  return k;
}

TwoKernelPlan MakeTwoKernelPlan() {
  TwoKernelPlan p;
  Node x;
  x.name = "x";
  x.op = OpCode::kParameter;
  x.shape.dtype = DType::kF32;
  x.shape.dims = {1 << 16};
  x.parameter_number = 0;
  const int xi = p.g.Add(x);
  Node y = x;
  y.name = "y";
  y.op = OpCode::kNeg;
  y.operands = {xi};
  y.parameter_number = -1;
  const int yi = p.g.Add(y);
  p.g.outputs = {yi};
  p.compiled.kernels.push_back(NopKernel("first", {xi, yi}, 256, 256));
  p.compiled.kernels.push_back(NopKernel("second", {yi, xi}, 64, 128));
  p.kernel_us = (2000 + 256 * 256 / 64) / 1e3 + (2000 + 64 * 128 / 64) / 1e3;
  return p;
}

TEST(KernelActivityTest, TheRunnerReportsKernelTimeWithoutTheHostsGaps) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  StatusOr<std::unique_ptr<Gpu>> gpu = OpenGpu(FakeDriver(), 0, FakeDriver());
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)->info().kernel_timing, "CUPTI activity records (" + FakeDriver() + ")");
  const TwoKernelPlan p = MakeTwoKernelPlan();
  TimingOptions timing;
  timing.warmup = 2;
  timing.repeats = 5;
  timing.flush_l2 = false;
  StatusOr<PlanTiming> t = (*gpu)->TimePlan(p.g, p.compiled, timing);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->kernel_note.empty()) << t->kernel_note;
  // The warm-up runs are not recorded: each timed run holds exactly its two kernels.
  EXPECT_NEAR(t->kernel_median_us, p.kernel_us, 1e-9);
  EXPECT_NEAR(t->kernel_min_us, p.kernel_us, 1e-9);
  EXPECT_NEAR(t->kernel_max_us, p.kernel_us, 1e-9);
  // The events also count the host's 1 us before each launch (float milliseconds).
  EXPECT_NEAR(t->median_us, p.kernel_us + 2.0, 1e-3);

  // A second plan's recording starts clean.
  timing.repeats = 3;
  StatusOr<PlanTiming> again = (*gpu)->TimePlan(p.g, p.compiled, timing);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NEAR(again->kernel_median_us, p.kernel_us, 1e-9);
}

TEST(KernelActivityTest, WithoutAProfilerThePlanIsStillTimedAndSaysWhy) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  StatusOr<std::unique_ptr<Gpu>> gpu = OpenGpu(FakeDriver(), 0, "none");
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)->info().kernel_timing, "not measured: no kernel profiler asked for");
  const TwoKernelPlan p = MakeTwoKernelPlan();
  TimingOptions timing;
  timing.warmup = 0;
  timing.repeats = 3;
  StatusOr<PlanTiming> t = (*gpu)->TimePlan(p.g, p.compiled, timing);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_GT(t->median_us, p.kernel_us);
  EXPECT_LT(t->kernel_median_us, 0);
  EXPECT_EQ(t->kernel_note, "not measured: no kernel profiler asked for");
}

}  // namespace
}  // namespace stitch::gpu::test
