// gpu_bench on a machine without a GPU: it says so in one line and exits with status 2,
// whether the driver library is missing or only a stub; --list compiles all 30 subgraphs with
// all three planners without one; bad flags exit with status 3. The runner (gpu_runner.h) also
// runs in-process against the stand-in driver, for kernels the suite does not produce.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/fake_cuda_driver.h"
#include "bench/gpu_command.h"
#include "gpu/gpu_runner.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "suite/suite.h"

namespace stitch::gpu::test {
namespace {

constexpr int kExitNoGpu = 2;
constexpr int kExitUsage = 3;

// Lines of a markdown table's body: "| <id> | ...".
std::vector<std::string> TableRows(const std::string& out) {
  std::vector<std::string> rows;
  for (const std::string& line : Lines(out)) {
    if (line.size() > 2 && line.rfind("| ", 0) == 0 &&
        std::isdigit(static_cast<unsigned char>(line[2]))) {
      rows.push_back(line);
    }
  }
  return rows;
}

void ExpectNoGpuMessage(const CommandResult& r, const std::string& reason) {
  EXPECT_EQ(r.exit_status, kExitNoGpu) << r.err;
  const std::vector<std::string> lines = Lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("gpu_bench: no usable CUDA GPU: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(reason), std::string::npos) << lines[0];
  EXPECT_TRUE(r.out.empty()) << r.out;
}

bool BuiltWithDriverApi() {
  CommandResult r = RunCommand(GpuBench() + " --driver /nonexistent/libcuda.so.1");
  return r.err.find("no CUDA driver support") == std::string::npos;
}

TEST(GpuBenchTest, MissingDriverLibrarySaysSoAndExits2) {
  CommandResult r = RunCommand(GpuBench() + " --driver /nonexistent/libcuda.so.1 --only 24");
  if (!BuiltWithDriverApi()) {
    ExpectNoGpuMessage(r, "no CUDA driver support");
    return;
  }
  ExpectNoGpuMessage(r, "cannot load the CUDA driver: /nonexistent/libcuda.so.1");
}

TEST(GpuBenchTest, StubDriverFailsCuInitAndExits2) {
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  if (!BuiltWithDriverApi()) GTEST_SKIP() << "gpu_bench was built without cuda.h";
  CommandResult r = RunCommand(GpuBench() + " --driver " + stub + " --only 24");
  ExpectNoGpuMessage(r, "cuInit failed: CUDA_ERROR_STUB_LIBRARY");
}

// The default driver: on a machine without a GPU this is the case CI meets; where a GPU
// exists the same command times one subgraph instead.
TEST(GpuBenchTest, DefaultDriverEitherTimesOrSaysThereIsNoGpu) {
  CommandResult r = RunCommand(GpuBench() + " --only 24 --warmup 1 --repeats 3");
  if (r.exit_status == kExitNoGpu) {
    ExpectNoGpuMessage(r, "");
    return;
  }
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const std::vector<std::string> rows = TableRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_EQ(rows[0].find(" - "), std::string::npos) << "unmeasured figures: " << rows[0];
}

// The driver code end to end against tests/bench/gpu_fake_cuda.cc, which checks every call
// (arguments per PTX entry, memory ranges) but runs nothing.
TEST(GpuBenchTest, FakeDriverTimesBothPlansAndWritesTheRunDirectory) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ScratchDir scratch("fake");
  const std::string& dir = scratch.path();
  CommandResult r =
      RunCommand(GpuBench() + " --driver " + FakeDriver() + " --profiler " + FakeDriver() +
                 " --only 1,12,24 --warmup 1 --repeats 3 --no-verify --out-dir " + dir);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_EQ(r.err.find("fake cuda:"), std::string::npos) << r.err;
  const std::vector<std::string> rows = TableRows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const std::string& row : rows) {
    EXPECT_EQ(row.find("| - |"), std::string::npos) << "unmeasured figures: " << row;
  }
  EXPECT_NE(r.out.find("Device: NVIDIA Fake H100 (host) (sm_90, 132 SMs, 80 GiB), peak 3352 GB/s "
                       "(memory clock x bus width), driver 12.8."),
            std::string::npos)
      << r.out;
  const std::vector<std::string> csv = Lines(ReadFile(dir + "/stitch.csv"));
  ASSERT_EQ(csv.size(), 4u);
  const std::vector<std::string> header = CsvFields(csv[0]);
  auto column = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return it - header.begin();
  };
  for (size_t i = 1; i < csv.size(); ++i) {
    // The fake refuses cubin, so every kernel went through the PTX path.
    EXPECT_NE(csv[i].find(",ptx,ptx,"), std::string::npos) << csv[i];
    // Kernel time leaves out the stand-in's 1 us host gap before each launch.
    const std::vector<std::string> f = CsvFields(csv[i]);
    ASSERT_EQ(f.size(), header.size()) << csv[i];
    for (const std::string plan : {"stitch", "baseline", "inductor"}) {
      const double us = std::stod(f[column(plan + "_us")]);
      const double kernel_us = std::stod(f[column(plan + "_kernel_us")]);
      const int kernels = std::stoi(f[column(plan + "_kernels")]);
      EXPECT_NEAR(us - kernel_us, kernels * 1.0, 0.02) << plan << ": " << csv[i];
    }
    EXPECT_FALSE(f[column("kernel_speedup_over_better_baseline")].empty()) << csv[i];
    // No statistic of #1, #12 or #24 spans a whole tensor: the goal's bytes are the bound's.
    EXPECT_EQ(f[column("schedule_bound_bytes")], f[column("lower_bound_bytes")]) << csv[i];
  }
  EXPECT_NE(r.out.find("Kernel time (CUPTI activity records (" + FakeDriver() + ")) of 9 plans"),
            std::string::npos)
      << r.out;
  const std::string device = ReadFile(dir + "/device.json");
  EXPECT_NE(device.find("\"kernel_timing\": \"CUPTI activity records"), std::string::npos)
      << device;
  EXPECT_NE(device.find("\"slug\": \"fake_h100_host\""), std::string::npos) << device;
  EXPECT_NE(device.find("\"repeats\": 3"), std::string::npos) << device;
  EXPECT_TRUE(std::filesystem::exists(dir + "/graphs.json"));
}

// #20's per-channel statistics span its whole input, which its output reads again: the CSV's
// schedule bound adds x's bytes past what the pricing device holds on chip, so an H200 (10 MiB
// more L2 than an H100) gets a smaller one. No GPU: --list compiles and prices only.
TEST(GpuBenchTest, ListCountsTheRereadAWholeBatchStatisticForces) {
  ScratchDir scratch("bounds");
  const std::string& dir = scratch.path();
  StatusOr<suite::SuiteEntry> entry = suite::BuildSuiteEntry(20);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  const int64_t x = entry->graph.nodes[entry->graph.Parameters()[0]].shape.bytes();
  for (const char* device : {"H100", "H200"}) {
    const std::string target = std::string(device) == "H100" ? "sm_90" : "sm_90/h200";
    const std::string csv_path = dir + "/" + device + ".csv";
    CommandResult r =
        RunCommand(GpuBench() + " --list --only 20 --target " + target + " --csv " + csv_path);
    ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
    const std::vector<std::string> csv = Lines(ReadFile(csv_path));
    ASSERT_EQ(csv.size(), 2u);
    const std::vector<std::string> header = CsvFields(csv[0]), f = CsvFields(csv[1]);
    auto at = [&](const std::string& name) {
      auto it = std::find(header.begin(), header.end(), name);
      EXPECT_NE(it, header.end()) << name;
      return static_cast<size_t>(it - header.begin());
    };
    const int64_t lower = std::stoll(f[at("lower_bound_bytes")]);
    const int64_t schedule = std::stoll(f[at("schedule_bound_bytes")]);
    EXPECT_EQ(schedule - lower, x - OnChipBytes(*FindDevice(device))) << csv[1];
  }
}

// Records CUPTI lost leave the kernel time out and say why; the plans are still timed.
TEST(GpuBenchTest, DroppedKernelRecordsLeaveKernelTimeOutAndSaySo) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  CommandResult r =
      RunCommand("STITCH_FAKE_CUPTI_DROP=2 " + GpuBench() + " --driver " + FakeDriver() +
                 " --profiler " + FakeDriver() + " --only 24 --warmup 1 --repeats 3 --no-verify");
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  const std::vector<std::string> rows = TableRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_NE(rows[0].find("| - / - / - | - |"), std::string::npos) << rows[0];
  EXPECT_NE(r.out.find("Kernel time: CUPTI dropped 1 activity records."), std::string::npos)
      << r.out;
}

// Under a CUDA tool (Nsight Compute, compute-sanitizer) CUPTI is the tool's: no kernel times
// unless a profiler is named.
TEST(GpuBenchTest, AnAttachedCudaToolKeepsCupti) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  const std::string run =
      GpuBench() + " --driver " + FakeDriver() + " --only 24 --warmup 1 --repeats 3 --no-verify";
  CommandResult r = RunCommand("CUDA_INJECTION64_PATH=/opt/tool/libinjection.so " + run);
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("a CUDA tool is attached (CUDA_INJECTION64_PATH)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("Kernel time: not measured: no kernel profiler asked for."),
            std::string::npos)
      << r.out;
  CommandResult named = RunCommand("CUDA_INJECTION64_PATH=/opt/tool/libinjection.so " + run +
                                   " --profiler " + FakeDriver());
  ASSERT_EQ(named.exit_status, 0) << named.err << named.out;
  EXPECT_NE(named.out.find("Kernel time (CUPTI activity records"), std::string::npos) << named.out;
  // Nsight Compute preloads its libraries rather than using the hook, and names its folder.
  CommandResult ncu =
      RunCommand("NV_COMPUTE_PROFILER_PERFWORKS_DIR=/opt/nsight-compute/target " + run);
  ASSERT_EQ(ncu.exit_status, 0) << ncu.err << ncu.out;
  EXPECT_NE(ncu.err.find("a CUDA tool is attached (NV_COMPUTE_PROFILER_PERFWORKS_DIR)"),
            std::string::npos)
      << ncu.err;
  EXPECT_NE(ncu.out.find("Kernel time: not measured: no kernel profiler asked for."),
            std::string::npos)
      << ncu.out;
}

TEST(GpuBenchTest, FakeDriverOutputsFailVerification) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  // The fake returns zeros for every output, which the interpreter does not.
  CommandResult r = RunCommand(GpuBench() + " --driver " + FakeDriver() + " --profiler none" +
                               " --only 12 --warmup 0 --repeats 1");
  EXPECT_EQ(r.exit_status, 1) << r.err << r.out;
  const std::vector<std::string> rows = TableRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_NE(rows[0].find("| NO / NO |"), std::string::npos) << rows[0];
  EXPECT_NE(r.out.find("#12: stitch output 0"), std::string::npos) << r.out;
}

TEST(GpuBenchTest, ZeroDevicesOrAMissingOrdinalSayThereIsNoGpu) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ExpectNoGpuMessage(
      RunCommand("STITCH_FAKE_CUDA_DEVICES=0 " + GpuBench() + " --driver " + FakeDriver()),
      "the CUDA driver reports no GPU");
  ExpectNoGpuMessage(RunCommand(GpuBench() + " --driver " + FakeDriver() + " --device 3"),
                     "device 3 requested, the CUDA driver sees 1");
}

// A kernel of `params` pointer parameters that does nothing, as PTX the stand-in parses.
CompiledKernel PtxKernel(const std::string& name, int params, std::vector<int> param_nodes,
                         uint32_t blocks, uint32_t threads) {
  CompiledKernel k;
  k.name = name;
  k.launch.grid = {blocks, 1, 1};
  k.launch.block = {threads, 1, 1};
  k.param_nodes = std::move(param_nodes);
  k.ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry " + name + "(\n";
  for (int i = 0; i < params; ++i) {
    k.ptx +=
        "  .param .u64 " + name + "_param_" + std::to_string(i) + (i + 1 < params ? ",\n" : "\n");
  }
  k.ptx += ")\n{\n  ret;\n}\n";
  return k;
}

// y = -x over 4,096 f32, with x's input of zeros: a graph for the stand-in driver's launches,
// whose kernels the tests give.
struct NegatedVector {
  Graph graph;
  int x = -1, y = -1;
  Tensor input;
  NegatedVector() {
    Node in;
    in.name = "x";
    in.op = OpCode::kParameter;
    in.shape.dtype = DType::kF32;
    in.shape.dims = {4096};
    in.parameter_number = 0;
    x = graph.Add(in);
    Node out = in;
    out.name = "y";
    out.op = OpCode::kNeg;
    out.operands = {x};
    out.parameter_number = -1;
    y = graph.Add(out);
    graph.outputs = {y};
    StatusOr<Tensor> t = FromDeviceBytes(in.shape, std::vector<uint8_t>(4 * 4096, 0));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (t.ok()) input = std::move(t).value();
  }
};

// A kernel with a workspace (codegen.h) takes it as one more argument, zero-filled before its
// first launch; one with grid barriers goes through cuLaunchCooperativeKernel, and is not
// launched when its grid cannot be resident at once. One without (a split reduction whose
// last block combines) launches normally at any grid.
TEST(GpuBenchTest, WorkspaceKernelsLaunchCooperativelyWithTheWorkspaceLast) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  StatusOr<std::unique_ptr<Gpu>> gpu = OpenGpu(FakeDriver(), 0, FakeDriver());
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const NegatedVector neg;
  const Graph& g = neg.graph;
  const int xi = neg.x, yi = neg.y;
  const Tensor& input = neg.input;

  CompileResult compiled;
  compiled.kernels.push_back(PtxKernel("plain", 2, {xi, yi}, 16, 256));
  // The fake fits 2048 / 256 = 8 blocks per SM on 132 SMs.
  CompiledKernel with_workspace = PtxKernel("with_workspace", 3, {xi, yi}, 8 * 132, 256);
  with_workspace.workspace_bytes = 1024;
  with_workspace.cooperative = true;
  compiled.kernels.push_back(with_workspace);
  CompiledKernel last_block = PtxKernel("last_block", 3, {xi, yi}, 100 * 132, 256);
  last_block.workspace_bytes = 512;
  compiled.kernels.push_back(last_block);
  StatusOr<std::vector<Tensor>> out = (*gpu)->RunPlan(g, compiled, {input});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::string log = FakeLaunchLog();
  EXPECT_NE(log.find("cuLaunchKernel plain args=2 last=16384B\n"), std::string::npos) << log;
  EXPECT_NE(log.find("cuLaunchCooperativeKernel with_workspace args=3 last=1024B zeroed\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("cuLaunchKernel last_block args=3 last=512B zeroed\n"), std::string::npos)
      << log;

  // Timed runs reuse the workspace as it is.
  TimingOptions timing;
  timing.warmup = 1;
  timing.repeats = 2;
  timing.flush_l2 = false;
  StatusOr<PlanTiming> t = (*gpu)->TimePlan(g, compiled, timing);
  ASSERT_TRUE(t.ok()) << t.status().ToString();

  // One block more than fits: refused before anything is launched.
  log = FakeLaunchLog();
  compiled.kernels[1].launch.grid[0] = 8 * 132 + 1;
  out = (*gpu)->RunPlan(g, compiled, {input});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition) << out.status().ToString();
  EXPECT_NE(out.status().message().find("kernel with_workspace"), std::string::npos)
      << out.status().ToString();
  EXPECT_EQ(FakeLaunchLog(), log);
}

// A kernel that keeps its rows in dynamic shared memory launches with its bytes, after the
// function is allowed more than the default 48 KiB (the stand-in driver refuses a launch above
// a function's limit, as the GPU does); one within the default launches with its bytes too.
TEST(GpuBenchTest, DynamicSharedMemoryIsAllowedAndLaunched) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  StatusOr<std::unique_ptr<Gpu>> gpu = OpenGpu(FakeDriver(), 0, FakeDriver());
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const NegatedVector neg;
  const Graph& g = neg.graph;
  const int xi = neg.x, yi = neg.y;

  CompileResult compiled;
  CompiledKernel rows = PtxKernel("rows", 2, {xi, yi}, 132, 1024);
  rows.dynamic_shared_bytes = 201216;  // suite row #12's 50,304 f32
  rows.shared_bytes = 512;
  compiled.kernels.push_back(rows);
  CompiledKernel small = PtxKernel("small", 2, {xi, yi}, 132, 256);
  small.dynamic_shared_bytes = 4096;
  compiled.kernels.push_back(small);
  StatusOr<std::vector<Tensor>> out = (*gpu)->RunPlan(g, compiled, {neg.input});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::string log = FakeLaunchLog();
  EXPECT_NE(log.find("cuLaunchKernel rows args=2 last=16384B shared=201216\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("cuLaunchKernel small args=2 last=16384B shared=4096\n"), std::string::npos)
      << log;
}

// The digest of each plan's code that a measured set stores (gpu_bench.csv) is the one
// cost_model_price gives the same plan of a checkout, so that the calibration can tell which
// plans a set timed; plans with other code have other digests.
TEST(GpuBenchTest, CodeDigestsAgreeWithCostModelPrice) {
  ScratchDir scratch("digests");
  const std::string& dir = scratch.path();
  CommandResult bench = RunCommand(GpuBench() + " --list --only 18,26,29 --csv " + dir + "/b.csv");
  ASSERT_EQ(bench.exit_status, 0) << bench.err << bench.out;
  CommandResult price = RunCommand(CostModelPrice() + " --only 18,26,29 --csv " + dir + "/p.csv");
  ASSERT_EQ(price.exit_status, 0) << price.err << price.out;
  const std::vector<std::string> b = Lines(ReadFile(dir + "/b.csv"));
  const std::vector<std::string> p = Lines(ReadFile(dir + "/p.csv"));
  ASSERT_EQ(b.size(), 4u);
  ASSERT_EQ(p.size(), 10u);
  const std::vector<std::string> bh = CsvFields(b[0]), ph = CsvFields(p[0]);
  auto at = [](const std::vector<std::string>& header, const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<size_t>(it - header.begin());
  };
  std::map<std::string, std::string> priced;  // "<id> <plan>" -> digest
  for (size_t i = 1; i < p.size(); ++i) {
    const std::vector<std::string> f = CsvFields(p[i]);
    priced[f[at(ph, "id")] + " " + f[at(ph, "plan")]] = f[at(ph, "code")];
  }
  std::set<std::string> distinct;
  for (size_t i = 1; i < b.size(); ++i) {
    const std::vector<std::string> f = CsvFields(b[i]);
    for (const auto& [column, plan] : {std::pair<std::string, std::string>{"stitch_code", "stitch"},
                                       {"baseline_code", "xla_model"},
                                       {"inductor_code", "inductor_model"}}) {
      const std::string& code = f[at(bh, column)];
      EXPECT_EQ(code.size(), 16u) << b[i];
      EXPECT_EQ(code, priced[f[0] + " " + plan]) << "#" << f[0] << " " << plan;
      distinct.insert(code);
    }
  }
  // #18's and #26's plans differ from one another in every planner; #29's three are one.
  EXPECT_EQ(distinct.size(), 7u);
}

// cost_model_price --device prices the plans compiled for the target on another device of the
// table, as the calibration prices a set measured on an H200: the same code, launched the same
// way, and the memory term of a bandwidth-bound row (#9, one loop kernel) scaled by the two
// devices' bandwidths. A device the table lacks is refused with the names it has.
TEST(GpuBenchTest, CostModelPricePricesTheTargetsPlansOnAnotherDevice) {
  ScratchDir scratch("device");
  const std::string& dir = scratch.path();
  const std::string price = CostModelPrice();
  CommandResult h100 = RunCommand(price + " --only 9 --csv " + dir + "/h100.csv");
  ASSERT_EQ(h100.exit_status, 0) << h100.err << h100.out;
  CommandResult h200 = RunCommand(price + " --only 9 --device H200 --csv " + dir + "/h200.csv");
  ASSERT_EQ(h200.exit_status, 0) << h200.err << h200.out;
  const std::vector<std::string> a = Lines(ReadFile(dir + "/h100.csv"));
  const std::vector<std::string> b = Lines(ReadFile(dir + "/h200.csv"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  const std::vector<std::string> header = CsvFields(a[0]);
  auto at = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<size_t>(it - header.begin());
  };
  // Each device at its own fitted bandwidth (fit-3: the H200's fit, 0.862 of 4.8 TB/s; the
  // H100's, 0.90 of 3.35).
  const double bandwidth_ratio =
      CostModelParametersFor(*FindDevice("H200"), kCurrentCostModel).bandwidth_bytes_per_second /
      CostModelParametersFor(*FindDevice("H100"), kCurrentCostModel).bandwidth_bytes_per_second;
  for (size_t i = 1; i < a.size(); ++i) {
    const std::vector<std::string> x = CsvFields(a[i]), y = CsvFields(b[i]);
    for (const char* same : {"plan", "code", "launches", "registers", "dram_bytes"}) {
      EXPECT_EQ(x[at(same)], y[at(same)]) << same << ": " << a[i] << " / " << b[i];
    }
    const double memory_h100 = std::stod(x[at("memory_us")]);
    const double memory_h200 = std::stod(y[at("memory_us")]);
    EXPECT_NEAR(memory_h100 / memory_h200, bandwidth_ratio, 0.01 * bandwidth_ratio) << a[i];
  }
  ExpectRefused(RunCommand(price + " --device X100 --csv " + dir + "/x.csv"),
                "no device 'X100' in the table (H100, H200");
}

// A candidate's bandwidth and re-use window given as shares of the priced device's own
// figures (what tools/fit_cost_model.py fits): half the bandwidth doubles a bandwidth-bound
// row's memory term on whichever device; a share outside (0, 1] is refused.
TEST(GpuBenchTest, CostModelPriceReadsSharesOfThePricedDevicesFigures) {
  ScratchDir scratch("shares");
  const std::string& dir = scratch.path();
  WriteFile(dir + "/sets.json", R"([{"bandwidth_fraction": 1.0, "reuse_window_fraction": 0.5},)"
                                R"( {"bandwidth_fraction": 0.5, "reuse_window_fraction": 0.5}])");
  for (const std::string device : {"H100", "H200"}) {
    CommandResult r = RunCommand(CostModelPrice() + " --only 9 --device " + device +
                                 " --parameters " + dir + "/sets.json --csv " + dir + "/p.csv");
    ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
    const auto rows = ReadCsvRows(dir + "/p.csv");
    ASSERT_EQ(rows.size(), 6u) << device;
    // Rows 0-2 are set 0's three plans, 3-5 set 1's, in the same order.
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(rows[i].at("plan"), rows[i + 3].at("plan")) << device;
      const double full = std::stod(rows[i].at("memory_us"));
      const double half = std::stod(rows[i + 3].at("memory_us"));
      EXPECT_NEAR(half / full, 2.0, 0.02) << device << ": " << rows[i].at("plan");
    }
  }
  WriteFile(dir + "/bad.json", R"([{"bandwidth_fraction": 1.5}])");
  ExpectRefused(RunCommand(CostModelPrice() + " --only 9 --parameters " + dir + "/bad.json --csv " +
                           dir + "/b.csv"),
                "bandwidth_fraction is not a share in (0, 1]");
}

TEST(GpuBenchTest, ListCompilesTheWholeSuiteWithBothPlanners) {
  ScratchDir scratch("list");
  const std::string& dir = scratch.path();
  CommandResult r = RunCommand(GpuBench() + " --list --csv " + dir + "/list.csv");
  ASSERT_EQ(r.exit_status, 0) << r.err << r.out;
  EXPECT_EQ(TableRows(r.out).size(), static_cast<size_t>(suite::kSuiteSize)) << r.out;
  EXPECT_NE(r.out.find("Not run"), std::string::npos) << r.out;

  const std::vector<std::string> csv = Lines(ReadFile(dir + "/list.csv"));
  ASSERT_EQ(csv.size(), static_cast<size_t>(suite::kSuiteSize) + 1);
  const std::vector<std::string> header = CsvFields(csv[0]);
  auto column = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return it - header.begin();
  };
  const auto stitch_kernels = column("stitch_kernels"),
             baseline_kernels = column("baseline_kernels"),
             inductor_kernels = column("inductor_kernels");
  const auto stitch_model = column("stitch_model_us"), stitch_error = column("stitch_model_error");
  const auto stitch_cubin = column("stitch_cubin_bytes"),
             baseline_cubin = column("baseline_cubin_bytes");
  const auto stitch_us = column("stitch_us"), error = column("error");
  for (size_t i = 1; i < csv.size(); ++i) {
    const std::vector<std::string> f = CsvFields(csv[i]);
    ASSERT_EQ(f.size(), header.size()) << csv[i];
    EXPECT_EQ(f[0], std::to_string(i));
    EXPECT_GT(std::stoi(f[stitch_kernels]), 0) << csv[i];
    EXPECT_GT(std::stoi(f[baseline_kernels]), 0) << csv[i];
    EXPECT_GT(std::stoi(f[inductor_kernels]), 0) << csv[i];
    // Every plan is priced, and without a measurement there is no model error.
    EXPECT_GT(std::stod(f[stitch_model]), 0) << csv[i];
    EXPECT_TRUE(f[stitch_error].empty()) << csv[i];
    EXPECT_TRUE(f[stitch_us].empty()) << "nothing is timed without a GPU: " << csv[i];
    EXPECT_TRUE(f[error].empty()) << csv[i];
#if STITCH_TEST_EXPECT_CUBIN
    // This build assembles cubin (ptxas or nvJitLink), so every kernel of both plans has one.
    EXPECT_GT(std::stoll(f[stitch_cubin]), 0) << csv[i];
    EXPECT_GT(std::stoll(f[baseline_cubin]), 0) << csv[i];
#else
    EXPECT_EQ(f[stitch_cubin], "0") << csv[i];
    EXPECT_EQ(f[baseline_cubin], "0") << csv[i];
#endif
  }
}

TEST(GpuBenchTest, BadFlagsExit3WithUsage) {
  for (const char* args : {"--only 31", "--repeats 0", "--target 90", "--bogus", "--warmup"}) {
    CommandResult r = RunCommand(GpuBench() + " " + args);
    EXPECT_EQ(r.exit_status, kExitUsage) << args << ": " << r.err;
    EXPECT_NE(r.err.find("usage: gpu_bench"), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace stitch::gpu::test
