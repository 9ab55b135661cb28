// bench/gpu/frameworks.py without a GPU: its NumPy backend (the op mapping the PyTorch and JAX
// runs share) reproduces the reference interpreter's outputs on every suite graph at the
// emulation scale, rng-uniform's Philox included, and on small graphs that cover every op and
// dtype with the edge cases of compiler/SEMANTICS.md; `time` skips frameworks that are not
// installed with a note instead of failing; `merge` writes the CSV and markdown table.
//
// Uses /usr/bin/python3, which has NumPy (scripts/setup installs python3-numpy);
// STITCH_TEST_PYTHON overrides it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bench/fake_cuda_driver.h"
#include "bench/gpu_command.h"
#include "gpu/suite_export.h"
#include "stitch/ir/verifier.h"
#include "suite/suite.h"
#include "support/graph_builder.h"

namespace stitch::gpu::test {
namespace {

std::string Python() {
  const char* p = std::getenv("STITCH_TEST_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

TEST(GpuFrameworksTest, NumpyBackendMatchesTheInterpreterOnEverySuiteGraph) {
  ASSERT_EQ(RunCommand(Python() + " -c 'import numpy'").exit_status, 0)
      << Python() << " cannot import numpy (scripts/setup installs python3-numpy)";
  ScratchDir scratch("reference");
  const std::string& dir = scratch.path();
  CommandResult exported = RunCommand(GpuBench() + " --export-reference " + dir);
  ASSERT_EQ(exported.exit_status, 0) << exported.err;

  CommandResult r = RunCommand(Python() + " " + FrameworksPy() + " check " + dir);
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  int ok = 0;
  for (const std::string& line : Lines(r.out)) {
    if (line.find(": ok (max rel err") != std::string::npos) ++ok;
  }
  EXPECT_EQ(ok, suite::kSuiteSize) << r.out << r.err;
  EXPECT_NE(r.out.find("numpy: 30/30 graphs match the reference interpreter"), std::string::npos)
      << r.out;
}

namespace gb = ::stitch::testing;

// A scalar constant broadcast to `like`'s shape.
int Splat(Graph& g, int like, double value) {
  const Shape s = g.nodes[like].shape;  // a copy: adding nodes moves them
  const int c = IsFloat(s.dtype) ? gb::ConstScalar(g, s.dtype, value)
                                 : gb::ConstI(g, {s.dtype, {}}, {static_cast<int64_t>(value)});
  return gb::Broadcast(g, c, s.dims, {});
}

void Outputs(Graph& g, std::initializer_list<int> xs) {
  for (int x : xs) gb::Output(g, x);
}

// Small graphs, one family of ops each, with the inputs RandomTensor draws (floats in
// [-2, 2), signed integers in [-10, 10], unsigned in [0, 20]) pushed to the edge cases.
std::vector<suite::SuiteEntry> OpGraphs() {
  std::vector<std::pair<std::string, Graph>> graphs;
  const std::vector<int64_t> d = {4, 6};
  const DType f32 = DType::kF32, s32 = DType::kS32, u32 = DType::kU32;
  {
    Graph g;
    const int x = gb::Param(g, {f32, d}, 0);
    for (OpCode op :
         {OpCode::kNeg, OpCode::kAbs, OpCode::kExp, OpCode::kLog, OpCode::kLog1p, OpCode::kExpm1,
          OpCode::kTanh, OpCode::kLogistic, OpCode::kSqrt, OpCode::kRsqrt, OpCode::kErf,
          OpCode::kSin, OpCode::kCos, OpCode::kTan, OpCode::kCbrt, OpCode::kIsFinite}) {
      gb::Output(g, gb::Unary(g, op, op == OpCode::kIsFinite ? gb::Unary(g, OpCode::kLog, x) : x));
    }
    // Ties and signed zero for the rounding ops.
    const int c = gb::ConstF(g, {f32, {8}}, {0.5, -0.5, 1.5, 2.5, -2.5, -0.0, 3.49999, 1e30});
    for (OpCode op : {OpCode::kRound, OpCode::kRoundNearestEven, OpCode::kSign, OpCode::kFloor,
                      OpCode::kCeil}) {
      gb::Output(g, gb::Unary(g, op, c));
    }
    graphs.emplace_back("f32 unary", std::move(g));
  }
  {
    Graph g;
    const int a = gb::Param(g, {f32, d}, 0), b = gb::Param(g, {f32, d}, 1);
    for (OpCode op : {OpCode::kAdd, OpCode::kSub, OpCode::kMul, OpCode::kDiv, OpCode::kPow,
                      OpCode::kMax, OpCode::kMin, OpCode::kRem, OpCode::kAtan2}) {
      gb::Output(g, gb::Binary(g, op, a, b));
    }
    for (CompareDirection c :
         {CompareDirection::kEq, CompareDirection::kNe, CompareDirection::kLt,
          CompareDirection::kLe, CompareDirection::kGt, CompareDirection::kGe}) {
      gb::Output(g, gb::Compare(g, c, a, b));
    }
    const int nan = gb::Unary(g, OpCode::kSqrt, a);  // NaN where a < 0
    Outputs(g, {gb::Binary(g, OpCode::kMax, nan, b), gb::Binary(g, OpCode::kMin, b, nan),
                gb::Compare(g, CompareDirection::kNe, nan, nan),
                gb::Select(g, gb::Compare(g, CompareDirection::kLt, a, b), a, b),
                gb::Clamp(g, b, a, gb::Binary(g, OpCode::kAdd, b, Splat(g, b, 1)))});
    graphs.emplace_back("f32 binary, compare, select, clamp", std::move(g));
  }
  {
    Graph g;
    const int a = gb::Param(g, {f32, d}, 0);
    const int h = gb::Param(g, {DType::kF16, d}, 1), bf = gb::Param(g, {DType::kBF16, d}, 2);
    const int big = gb::Binary(g, OpCode::kMul, a, Splat(g, a, 1e5));  // beyond f16's range
    const int fine = gb::Binary(g, OpCode::kMul, a, Splat(g, a, 1.0 / 3));
    Outputs(g, {gb::Convert(g, big, DType::kF16), gb::Convert(g, fine, DType::kF16),
                gb::Convert(g, fine, DType::kBF16), gb::Convert(g, big, DType::kBF16),
                gb::Convert(g, bf, DType::kF16), gb::Convert(g, h, DType::kBF16),
                gb::Convert(g, gb::Unary(g, OpCode::kExp, gb::Convert(g, h, f32)), DType::kF16),
                gb::Convert(g, fine, DType::kF64)});
    graphs.emplace_back("f16, bf16 and f64 conversions", std::move(g));
  }
  for (DType t : {s32, u32, DType::kS8, DType::kU8, DType::kS64, DType::kU64}) {
    Graph g;
    const int a = gb::Param(g, {t, d}, 0), b = gb::Param(g, {t, d}, 1);
    const int diff = gb::Binary(g, OpCode::kSub, a, b);  // wraps below zero where unsigned
    for (OpCode op : {OpCode::kAdd, OpCode::kMul, OpCode::kDiv, OpCode::kRem, OpCode::kMax,
                      OpCode::kMin, OpCode::kAnd, OpCode::kOr, OpCode::kXor}) {
      gb::Output(g, gb::Binary(g, op, diff, b));
    }
    // Amounts past the width, and negative ones (read as unsigned).
    const int bits = DTypeBytes(t) * 8;
    const int far = gb::Binary(g, OpCode::kAdd, b, Splat(g, b, bits - 4));
    for (OpCode op :
         {OpCode::kShiftLeft, OpCode::kShiftRightLogical, OpCode::kShiftRightArithmetic}) {
      Outputs(g, {gb::Binary(g, op, diff, far), gb::Binary(g, op, diff, b)});
    }
    for (OpCode op : {OpCode::kNot, OpCode::kAbs, OpCode::kNeg, OpCode::kSign, OpCode::kPopcnt}) {
      gb::Output(g, gb::Unary(g, op, diff));
    }
    Outputs(g, {gb::Compare(g, CompareDirection::kLt, diff, b),
                gb::Compare(g, CompareDirection::kGe, diff, a), gb::Convert(g, diff, f32),
                gb::Convert(g, diff, DType::kS64), gb::Convert(g, diff, DType::kU64),
                gb::Convert(g, diff, DType::kU8), gb::Convert(g, diff, DType::kPred)});
    graphs.emplace_back(std::string(DTypeName(t)) + " integer ops", std::move(g));
  }
  {
    Graph g;
    const int a = gb::Param(g, {f32, d}, 0);
    // Times 2^33: exact in f32 too, so every backend converts the same values.
    const int big = gb::Binary(g, OpCode::kMul, a, Splat(g, a, 0x1p33));
    const int nan = gb::Unary(g, OpCode::kSqrt, big);
    const int small = gb::Binary(g, OpCode::kMul, a, Splat(g, a, 3));
    for (DType t : {DType::kS8, DType::kU8, s32, u32, DType::kS64, DType::kU64}) {
      Outputs(g, {gb::Convert(g, big, t), gb::Convert(g, nan, t), gb::Convert(g, small, t)});
    }
    gb::Output(g, gb::Convert(g, small, DType::kPred));
    graphs.emplace_back("float to integer: truncation, saturation, NaN", std::move(g));
  }
  {
    Graph g;
    const int a = gb::Param(g, {f32, d}, 0), i = gb::Param(g, {s32, d}, 1);
    const int u = gb::Param(g, {u32, d}, 2), w = gb::Param(g, {DType::kF64, d}, 3);
    const int c = gb::Param(g, {DType::kS8, d}, 4);
    Outputs(g, {gb::BitcastConvert(g, a, s32), gb::BitcastConvert(g, a, u32),
                gb::BitcastConvert(g, i, f32), gb::BitcastConvert(g, u, f32),
                gb::BitcastConvert(g, w, DType::kU64), gb::BitcastConvert(g, w, DType::kS64),
                gb::BitcastConvert(g, c, DType::kU8)});
    graphs.emplace_back("bitcast-convert", std::move(g));
  }
  {
    Graph g;
    const int x = gb::Param(g, {f32, d}, 0);
    const int zero = gb::ConstScalar(g, f32, -7);
    Outputs(g, {gb::Slice(g, x, {1, 0}, {4, 6}, {2, 3}), gb::Concat(g, {x, x, x}, 1),
                gb::Pad(g, x, zero, {-1, 2}, {1, -2}, {1, 0}), gb::Pad(g, x, zero, {0, 0}, {0, 0}),
                gb::Reverse(g, x, {0, 1}), gb::Transpose(g, x, {1, 0}), gb::Reshape(g, x, {3, 8}),
                gb::Broadcast(g, x, {2, 4, 6}, {1, 2}), gb::Broadcast(g, x, {4, 3, 6}, {0, 2}),
                gb::Iota(g, {s32, {4, 6}}, 1), gb::Iota(g, {DType::kF16, {3, 5}}, 0),
                gb::Iota(g, {DType::kU64, {2, 3, 4}}, 2)});
    graphs.emplace_back("data movement and iota", std::move(g));
  }
  {
    Graph g;
    const int x = gb::Param(g, {f32, {3, 4, 5}}, 0), p = gb::Param(g, {DType::kPred, {3, 4}}, 1);
    const int i = gb::Param(g, {s32, {3, 4}}, 2), u = gb::Param(g, {u32, {3, 4}}, 3);
    const int f0 = gb::ConstScalar(g, f32, 0), f1 = gb::ConstScalar(g, f32, 1);
    const int ninf = gb::ConstScalar(g, f32, -INFINITY), pinf = gb::ConstScalar(g, f32, INFINITY);
    const int t = gb::ConstI(g, {DType::kPred, {}}, {1}),
              f = gb::ConstI(g, {DType::kPred, {}}, {0});
    const int all = gb::ConstI(g, {s32, {}}, {-1}), none = gb::ConstI(g, {s32, {}}, {0});
    const int u0 = gb::ConstI(g, {u32, {}}, {0}), s5 = gb::ConstI(g, {s32, {}}, {5});
    Outputs(
        g,
        {gb::Reduce(g, x, f0, {0, 2}, ReduceKind::kSum),
         gb::Reduce(g, x, f1, {1}, ReduceKind::kProd),
         gb::Reduce(g, x, ninf, {0, 1, 2}, ReduceKind::kMax),
         gb::Reduce(g, x, pinf, {2}, ReduceKind::kMin), gb::Reduce(g, p, t, {1}, ReduceKind::kAnd),
         gb::Reduce(g, p, f, {0}, ReduceKind::kOr), gb::Reduce(g, i, all, {1}, ReduceKind::kAnd),
         gb::Reduce(g, i, none, {0}, ReduceKind::kOr),
         gb::Reduce(g, i, s5, {0, 1}, ReduceKind::kSum),
         gb::Reduce(g, u, u0, {0}, ReduceKind::kMax)});
    graphs.emplace_back("reductions", std::move(g));
  }
  {
    Graph g;
    const int p = gb::Param(g, {DType::kPred, d}, 0), q = gb::Param(g, {DType::kPred, d}, 1);
    const int x = gb::Param(g, {f32, d}, 2);
    Outputs(g, {gb::Binary(g, OpCode::kAnd, p, q), gb::Binary(g, OpCode::kOr, p, q),
                gb::Binary(g, OpCode::kXor, p, q), gb::Unary(g, OpCode::kNot, p),
                gb::Convert(g, p, f32), gb::Convert(g, p, s32), gb::Select(g, q, x, Splat(g, x, 0)),
                gb::Compare(g, CompareDirection::kEq, p, q)});
    graphs.emplace_back("pred", std::move(g));
  }
  {
    Graph g;
    const int seed = gb::Param(g, {DType::kU64, {}}, 0);
    Outputs(
        g, {gb::RngUniform(g, seed, {f32, d}, 0), gb::RngUniform(g, seed, {DType::kF16, {5, 7}}, 3),
            gb::RngUniform(g, seed, {DType::kBF16, {3, 3}}, int64_t{1} << 33),
            gb::RngUniform(g, seed, {DType::kF64, {2, 2}}, 7)});
    graphs.emplace_back("rng-uniform", std::move(g));
  }
  std::vector<suite::SuiteEntry> entries;
  for (auto& [name, graph] : graphs) {
    suite::SuiteEntry e;
    e.id = static_cast<int>(entries.size()) + 1;
    e.model = "ops";
    e.pattern = name;
    e.shape_text = "small";
    e.graph = std::move(graph);
    e.graph.name = name;
    entries.push_back(std::move(e));
  }
  return entries;
}

TEST(GpuFrameworksTest, NumpyBackendMatchesTheInterpreterOnEveryOp) {
  std::vector<suite::SuiteEntry> entries = OpGraphs();
  for (const suite::SuiteEntry& e : entries) {
    ASSERT_TRUE(Verify(e.graph).ok()) << e.pattern << ": " << Verify(e.graph).ToString();
  }
  ScratchDir scratch("ops");
  ASSERT_TRUE(WriteReference(scratch.path(), entries).ok());
  CommandResult r = RunCommand(Python() + " " + FrameworksPy() + " check " + scratch.path());
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("numpy: " + std::to_string(entries.size()) + "/" +
                       std::to_string(entries.size()) + " graphs match"),
            std::string::npos)
      << r.out << r.err;

  // The PyTorch and JAX mappings too, on the CPU, where STITCH_TEST_FRAMEWORK_PYTHON names a
  // Python that has them (graphs with rng-uniform or ops a backend lacks are skipped).
  const char* frameworks = std::getenv("STITCH_TEST_FRAMEWORK_PYTHON");
  if (frameworks == nullptr || *frameworks == '\0') return;
  for (const std::string backend : {"torch", "jax"}) {
    const std::string python = frameworks;
    if (RunCommand(python + " -c 'import " + backend + "'").exit_status != 0) continue;
    CommandResult b = RunCommand(python + " " + FrameworksPy() + " check " + scratch.path() +
                                 " --backend " + backend);
    EXPECT_EQ(b.exit_status, 0) << backend << ":\n" << b.out << b.err;
  }
}

TEST(GpuFrameworksTest, CheckReportsAMismatch) {
  // Swap one reference output for another graph's: the check must notice.
  ScratchDir scratch("tampered");
  const std::string& dir = scratch.path();
  ASSERT_EQ(RunCommand(GpuBench() + " --export-reference " + dir + " --only 9,24").exit_status, 0);
  ASSERT_EQ(RunCommand("cp " + dir + "/24/input0.npy " + dir + "/24/output0.npy").exit_status, 0);
  CommandResult r = RunCommand(Python() + " " + FrameworksPy() + " check " + dir);
  EXPECT_EQ(r.exit_status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("#24 CNN/Transformer layout / transpose 2D (+relu): MISMATCH"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("#9 LLaMA MLP / SwiGLU pointwise: ok"), std::string::npos) << r.out;
}

TEST(GpuFrameworksTest, TimeSkipsFrameworksThatAreMissingAndMergeWritesTheTable) {
  ScratchDir scratch("run");
  const std::string& dir = scratch.path();
  ASSERT_EQ(RunCommand(GpuBench() + " --list --only 1,24 --csv " + dir + "/stitch.csv").exit_status,
            0);
  ASSERT_EQ(
      RunCommand(GpuBench() + " --export-graphs " + dir + "/graphs.json --only 1,24").exit_status,
      0);
  // What gpu_bench writes next to stitch.csv on a GPU machine.
  WriteFile(dir + "/device.json", R"({"name": "NVIDIA H100 80GB HBM3", "slug": "h100_80gb_hbm3",
    "arch": "sm_90", "target": "sm_90", "sms": 132, "l2_bytes": 52428800,
    "memory_bytes": 85520809984, "peak_bytes_per_second": 3.35e12,
    "peak_source": "memory clock x bus width", "driver_version": "12.8", "warmup": 2,
    "repeats": 3, "flush_l2": true, "ids": [1, 24], "date": "2026-01-01 00:00 UTC"})");

  // /usr/bin/python3 has neither PyTorch nor JAX here; where it has them but no GPU, the
  // frameworks say that instead. Either way the command succeeds and explains.
  CommandResult timed =
      RunCommand(Python() + " " + FrameworksPy() + " time --run-dir " + dir + " --device cuda");
  ASSERT_EQ(timed.exit_status, 0) << timed.err;
  const std::string report = ReadFile(dir + "/frameworks.json");
  for (const char* mode : {"torch-eager", "torch-compile", "jax-jit"}) {
    EXPECT_NE(report.find(std::string("\"") + mode + "\""), std::string::npos) << report;
  }

  const std::string results = dir + "/results";
  CommandResult merged = RunCommand(Python() + " " + FrameworksPy() + " merge --run-dir " + dir +
                                    " --results " + results);
  ASSERT_EQ(merged.exit_status, 0) << merged.err;
  const std::vector<std::string> csv = Lines(ReadFile(results + "/gpu_h100_80gb_hbm3.csv"));
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_EQ(csv[0].rfind("id,subgraph,lower_bound_bytes,stitch_kernels,baseline_kernels,", 0), 0u)
      << csv[0];
  const std::string md = ReadFile(results + "/gpu_h100_80gb_hbm3.md");
  EXPECT_NE(md.find("# GPU benchmark: NVIDIA H100 80GB HBM3"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | BERT-base / bias_add+layernorm"), std::string::npos) << md;
  EXPECT_NE(md.find("| 24 | CNN/Transformer layout"), std::string::npos) << md;
  for (const char* label : {"PyTorch eager", "jax.jit"}) {
    const std::string name = label;
    EXPECT_TRUE(md.find("- " + name + ": not timed: ") != std::string::npos ||
                md.find("- Over " + name + " (") != std::string::npos)
        << md;
  }
}

// Kernel time against kernel time: gpu_bench's CUPTI figures (here from the stand-in driver,
// which also stands in for CUPTI) beside the frameworks' profiled kernel times, in the shape
// `time` writes them on a GPU, and the goals the table is held to.
TEST(GpuFrameworksTest, MergeComparesKernelTimeWithKernelTime) {
  if (!std::filesystem::exists(FakeDriver())) GTEST_SKIP() << "built without cuda.h";
  ScratchDir scratch("kernels");
  const std::string& dir = scratch.path();
  CommandResult bench =
      RunCommand(GpuBench() + " --driver " + FakeDriver() + " --profiler " + FakeDriver() +
                 " --only 12,24 --warmup 0 --repeats 3 " + "--no-verify --out-dir " + dir);
  ASSERT_EQ(bench.exit_status, 0) << bench.err << bench.out;
  const std::vector<std::string> csv = Lines(ReadFile(dir + "/stitch.csv"));
  ASSERT_EQ(csv.size(), 3u);
  const std::vector<std::string> header = CsvFields(csv[0]);
  const auto kernel_column =
      std::find(header.begin(), header.end(), "stitch_kernel_us") - header.begin();
  const double kernel_12 = std::stod(CsvFields(csv[1])[kernel_column]);
  const double kernel_24 = std::stod(CsvFields(csv[2])[kernel_column]);
  // torch.compile's kernels take twice stitch's on #12 and half on #24; jax.jit's are 3x.
  auto times = [](double host, double kernel) {
    return "{\"median_us\": " + std::to_string(host) +
           ", \"kernel\": {\"median_us\": " + std::to_string(kernel) + "}}";
  };
  WriteFile(dir + "/frameworks.json",
            "{\"frameworks\": {\"torch-compile\": {\"version\": \"2.11\", \"times\": {\"12\": " +
                times(900, 2 * kernel_12) + ", \"24\": " + times(900, kernel_24 / 2) +
                "}}, \"jax-jit\": {\"version\": \"0.10\", \"times\": {\"12\": " +
                times(900, 3 * kernel_12) + ", \"24\": " + times(900, 3 * kernel_24) + "}}}}");
  const std::string results = dir + "/results";
  CommandResult merged = RunCommand(Python() + " " + FrameworksPy() + " merge --run-dir " + dir +
                                    " --results " + results);
  ASSERT_EQ(merged.exit_status, 0) << merged.err;
  const std::string md = ReadFile(results + "/gpu_fake_h100_host.md");
  EXPECT_NE(md.find("## Kernel time"), std::string::npos) << md;
  EXPECT_NE(md.find("Stitch: CUPTI activity records (" + FakeDriver() + ")"), std::string::npos)
      << md;
  char row12[128];
  std::snprintf(row12, sizeof(row12), "| 12 | %.1f |", kernel_12);
  EXPECT_NE(md.find(row12), std::string::npos) << md;
  EXPECT_NE(md.find(" | 2.00 | 3.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find(" | 0.50 | 3.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("- Over torch.compile, kernel time against kernel time: 1.00x (geometric "
                    "mean over 2 rows); under 0.97x: #24."),
            std::string::npos)
      << md;
  // #12 moves 3.3 GB; the stand-in's microseconds put it far above peak.
  EXPECT_NE(md.find("in kernel time: 1 of 1."), std::string::npos) << md;
  const std::vector<std::string> merged_csv = Lines(ReadFile(results + "/gpu_fake_h100_host.csv"));
  ASSERT_EQ(merged_csv.size(), 3u);
  EXPECT_NE(merged_csv[0].find("stitch_kernel_us,stitch_kernel_pct_peak,torch_eager_kernel_us"),
            std::string::npos)
      << merged_csv[0];
}

}  // namespace
}  // namespace stitch::gpu::test
