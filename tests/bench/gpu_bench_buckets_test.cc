// gpu_bench --buckets without a GPU: --list --buckets compiles every row as a bucket's bundle
// where its graph is shape-generic and says why where it is not; each bucketed row's kernels
// run on the host emulator at e' (the extent inside the bucket gpu_bench times besides the
// row's own) against the interpreter at the emulation scale, and at full geometry on sampled
// blocks, bounds-checked, at e and e'; the runner passes the extent as the last kernel
// argument and refuses one outside the bucket (against the stand-in driver).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/fake_cuda_driver.h"
#include "bench/gpu_command.h"
#include "gpu/bucket_case.h"
#include "gpu/gpu_runner.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/reference/shape_scaling.h"
#include "suite/suite.h"

namespace stitch::gpu::test {
namespace {

// Rows whose graphs were shape-generic when --buckets was written: 26 of 30 (#13 and #24
// transpose the extent away, #17 reduces it into rows, #29's divisor has 8 rows for 96).
constexpr int kLeastGenericRows = 26;

bool PowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

TEST(GpuBenchBucketsTest, ListBucketsCompilesEveryRowAndSaysWhyRowsStayExact) {
  ScratchDir scratch("buckets_list");
  const std::string csv = scratch.path() + "/buckets.csv";
  CommandResult r = RunCommand(GpuBench() + " --list --buckets --csv " + csv);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Not run"), std::string::npos) << r.out;
  const auto rows = ReadCsvRows(csv);
  ASSERT_EQ(rows.size(), static_cast<size_t>(suite::kSuiteSize));
  int generic = 0;
  for (const auto& row : rows) {
    const std::string where = "row " + row.at("id");
    EXPECT_TRUE(row.at("error").empty()) << where << ": " << row.at("error");
    EXPECT_TRUE(row.at("bucket_us").empty()) << where << ": nothing is timed without a GPU";
    if (row.at("generic") != "yes") {
      EXPECT_FALSE(row.at("not_generic").empty()) << where << " is exact without a reason";
      EXPECT_NE(r.out.find("#" + row.at("id") + " exact only: "), std::string::npos) << r.out;
      continue;
    }
    ++generic;
    const int64_t e = std::stoll(row.at("extent")), other = std::stoll(row.at("other_extent"));
    const int64_t lo = std::stoll(row.at("bucket_lo")), hi = std::stoll(row.at("bucket_hi"));
    EXPECT_TRUE(PowerOfTwo(hi)) << where;
    EXPECT_GT(lo, hi / 2) << where;
    EXPECT_TRUE(lo <= e && e <= hi) << where << ": e " << e << " outside " << lo << ".." << hi;
    EXPECT_TRUE(lo <= other && other <= hi) << where << ": e' " << other;
    EXPECT_TRUE(other != e || lo == hi) << where << ": e' is e in a bucket of several extents";
    EXPECT_GT(std::stoi(row.at("bucket_kernels")), 0) << where;
    for (const char* model : {"exact_model_us", "bucket_model_us", "exact_other_model_us"}) {
      EXPECT_GT(std::stod(row.at(model)), 0) << where << " " << model;
    }
  }
  EXPECT_GE(generic, kLeastGenericRows) << r.out;
  EXPECT_EQ(rows[0].at("generic"), "yes") << "BERT's bias_add+layernorm";
  EXPECT_EQ(rows[11].at("generic"), "yes") << "GPT's vocabulary softmax";
}

class BucketRowTest : public ::testing::TestWithParam<int> {};

// The bundle gpu_bench times, compiled at full shape, runs on sampled blocks at full
// geometry at e and e', every access bounds-checked against buffers sized at that extent;
// then the bucket's kernels of the emulation-scale graph run whole at its e', as gpu_bench
// checks them on a GPU, against the interpreter.
TEST_P(BucketRowTest, BucketKernelsStayInBoundsAndMatchTheInterpreterAtTheOtherExtent) {
  StatusOr<suite::SuiteEntry> entry = suite::BuildSuiteEntry(GetParam());
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  StatusOr<OuterNamed> named = NameOuterParameters(entry->graph);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  // A row that stays exact (the --list test counts them) has nothing more to run; it must
  // say why.
  if (StatusOr<ShapeClass> c = ClassifyShapes(named->graph); !c.ok()) {
    EXPECT_FALSE(c.status().message().empty()) << "row " << GetParam();
    return;
  }
  CompileOptions options;
  options.emit_ptx = false;
  options.never_slower = false;  // stitch's own plan, as gpu_bench times it
  StatusOr<CompileResult> bucket = CompileGraph(named->graph, options);
  ASSERT_TRUE(bucket.ok()) << bucket.status().ToString();
  if (!bucket->shape_generic()) {
    EXPECT_FALSE(bucket->not_generic.empty()) << "row " << GetParam();
    return;
  }
  StatusOr<std::unique_ptr<Emulator>> emulator = Emulator::Create();
  ASSERT_TRUE(emulator.ok()) << emulator.status().ToString();
  BlockSampling sampling;
  sampling.seed = 3000 + static_cast<uint64_t>(GetParam());
  for (int64_t extent : {named->extent, SecondExtent(bucket->served, named->extent)}) {
    StatusOr<SampledRun> run = RunSampledOnEmulator(RunGraphAt(*bucket, extent), bucket->plan,
                                                    bucket->kernels, sampling, **emulator, extent);
    EXPECT_TRUE(run.ok()) << "extent " << extent << ": " << run.status().ToString();
  }

  std::optional<ScaledGraph> scaled = ScaleForEmulation(entry->graph);
  ASSERT_TRUE(scaled.has_value());
  options.max_persistent_grid_blocks = kEmulatorMaxPersistentGridBlocks;
  StatusOr<BucketCheck> check =
      PrepareBucketCheck(scaled->graph, named->graph.outer_parameters, options,
                         1000 + static_cast<uint64_t>(GetParam()));
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  for (const CompiledKernel& k : check->compiled.kernels) EXPECT_TRUE(k.takes_outer_extent);
  StatusOr<EmulatedRun> run = RunOnEmulator(check->run_graph, check->compiled.kernels,
                                            check->inputs, **emulator, check->extent);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const CheckOutcome outcome = CompareWithReference(*check, run->outputs);
  EXPECT_TRUE(outcome.pass) << outcome.message;
}

INSTANTIATE_TEST_SUITE_P(Suite, BucketRowTest, ::testing::Range(1, suite::kSuiteSize + 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "row" + std::to_string(info.param);
                         });

// A bucket's kernels get the run's extent after their pointers; a missing extent, one outside
// the bucket, a graph at another extent and an extent for an exact compile are refused.
TEST(GpuBenchBucketsTest, RunnerPassesTheExtentLastAndRefusesOneOutsideTheBucket) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  StatusOr<std::unique_ptr<Gpu>> gpu = OpenGpu(FakeDriver(), 0, FakeDriver());
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  StatusOr<suite::SuiteEntry> entry = suite::BuildSuiteEntry(1);
  ASSERT_TRUE(entry.ok());
  std::optional<ScaledGraph> scaled = ScaleForEmulation(entry->graph);
  ASSERT_TRUE(scaled.has_value());
  CompileOptions options;
  options.codegen.target = *Target::Parse("sm_90");
  options.codegen.emit_cubin = false;
  options.never_slower = false;
  StatusOr<BucketCheck> check = PrepareBucketCheck(scaled->graph, {0}, options, 7);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  const int64_t extent = check->extent;
  StatusOr<std::vector<Tensor>> out =
      (*gpu)->RunPlan(check->run_graph, check->compiled, check->inputs, extent);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::string log = FakeLaunchLog();
  EXPECT_NE(log.find(" extent=" + std::to_string(extent) + "\n"), std::string::npos) << log;

  TimingOptions timing;
  timing.warmup = 0;
  timing.repeats = 1;
  const Bucket served = check->compiled.served;
  for (int64_t bad : {int64_t{0}, served.lo - 1, served.hi + 1}) {
    StatusOr<PlanTiming> t = (*gpu)->TimePlan(check->run_graph, check->compiled, timing, bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
  }
  // Buffers sized at e' but the kernels told another extent of the bucket.
  const int64_t elsewhere = extent == served.hi ? served.lo : served.hi;
  StatusOr<PlanTiming> t = (*gpu)->TimePlan(check->run_graph, check->compiled, timing, elsewhere);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
  EXPECT_EQ(FakeLaunchLog(), log) << "a refused run launched something";

  Graph exact_graph = scaled->graph;
  StatusOr<CompileResult> exact = CompileGraph(exact_graph, options);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  t = (*gpu)->TimePlan(exact->graph, *exact, timing, extent);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
}

// gpu_bench --buckets end to end on the stand-in driver: four timings per bucketed row,
// none for a row that stays exact, and buckets.csv in --out-dir.
TEST(GpuBenchBucketsTest, FakeDriverTimesFourWaysAndWritesBucketsCsv) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ScratchDir scratch("buckets_fake");
  CommandResult r =
      RunCommand(GpuBench() + " --buckets --driver " + FakeDriver() + " --profiler none" +
                 " --only 1,13 --warmup 1 --repeats 2 --no-verify --out-dir " + scratch.path());
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_EQ(r.err.find("fake cuda:"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Timed 1/1 shape-generic rows"), std::string::npos) << r.out;
  const auto rows = ReadCsvRows(scratch.path() + "/buckets.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const char* us : {"exact_us", "bucket_us", "exact_other_us", "bucket_other_us"}) {
    EXPECT_GT(std::stod(rows[0].at(us)), 0) << us;
    EXPECT_TRUE(rows[1].at(us).empty()) << us;
  }
  EXPECT_EQ(rows[0].at("loaded"), "ptx");
  EXPECT_EQ(rows[1].at("generic"), "no");
  EXPECT_TRUE(std::filesystem::exists(scratch.path() + "/device.json"));
  for (const char* us : {"exact_kernel_us", "bucket_kernel_us"}) {
    EXPECT_TRUE(rows[0].at(us).empty()) << us << ": no profiler, no kernel time";
  }
  EXPECT_NE(r.out.find("Kernel time not measured"), std::string::npos) << r.out;
}

// With the stand-in's kernel records, each way's kernel time is its event time less the
// stand-in's 1 us host gap before each of its kernels.
TEST(GpuBenchBucketsTest, FakeProfilerGivesEveryWayItsKernelTime) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ScratchDir scratch("buckets_kernel_time");
  CommandResult r = RunCommand(
      GpuBench() + " --buckets --driver " + FakeDriver() + " --profiler " + FakeDriver() +
      " --only 1 --warmup 1 --repeats 3 --no-verify --out-dir " + scratch.path());
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Kernel time of the same runs, bucket / exact (geometric mean over 1 rows)"),
            std::string::npos)
      << r.out;
  const auto rows = ReadCsvRows(scratch.path() + "/buckets.csv");
  ASSERT_EQ(rows.size(), 1u);
  const auto& row = rows[0];
  const double exact_kernels = std::stod(row.at("exact_kernels"));
  const double bucket_kernels = std::stod(row.at("bucket_kernels"));
  for (const auto& [way, kernels] : {std::pair<std::string, double>{"exact", exact_kernels},
                                     {"bucket", bucket_kernels},
                                     {"exact_other", exact_kernels},
                                     {"bucket_other", bucket_kernels}}) {
    const double us = std::stod(row.at(way + "_us"));
    const double kernel_us = std::stod(row.at(way + "_kernel_us"));
    EXPECT_GT(kernel_us, 0) << way;
    EXPECT_NEAR(us - kernel_us, kernels * 1.0, 0.02) << way;
  }
  EXPECT_FALSE(row.at("kernel_bucket_over_exact").empty());
  EXPECT_FALSE(row.at("kernel_bucket_over_exact_other").empty());
}

}  // namespace
}  // namespace stitch::gpu::test
