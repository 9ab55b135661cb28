// Tests of the kernel workspace (CompiledKernel::workspace_bytes, codegen.h) on the emulator:
// RunOnEmulator gives each such kernel a zero-filled, 256-byte-aligned workspace as its last
// argument, the grid barrier runs on it, and the footprint (EmulatorOptions::count_footprint)
// counts each phase between grid barriers on its own, the workspace included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulated_run.h"
#include "stitch/emulator/emulator.h"
#include "stitch/ir/graph.h"
#include "stitch/reference/tensor.h"
#include "support/llvm_text.h"

namespace stitch {
namespace {

const char* const kHeader = R"(
target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
declare void @stitch.grid.sync(ptr) #0
attributes #0 = { convergent nounwind }
)";

// The index computations both kernels share: i = global thread index over a 1-D grid,
// n = threads in the grid, j = (i + threads per block) mod n, an element of another block.
const char* const kIndices = R"(
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nctaid = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %base = mul i32 %ctaid, %ntid
  %i = add i32 %base, %tid
  %n = mul i32 %nctaid, %ntid
  %i64 = zext i32 %i to i64
  %jn = add i32 %i, %ntid
  %j = urem i32 %jn, %n
  %j64 = zext i32 %j to i64
)";

std::string ToBitcode(const std::string& ir) { return testing::TextIrToBitcode(kHeader + ir); }

constexpr uint32_t kBlocks = 8;
constexpr uint32_t kThreads = 64;
constexpr uint64_t kN = uint64_t{kBlocks} * kThreads;
// Where the exchange kernel's scratch starts in its workspace: past the barrier's 8 bytes,
// on a sector boundary.
constexpr uint64_t kScratchOffset = 256;

// Phase 1: out1[i] = 2 x[i], and scratch[i] = 2 x[i] + 1 in the workspace; grid barrier on
// the workspace; phase 2: out2[i] = out1[j] + scratch[j] + x[j] = 5 x[j] + 1, values other
// blocks wrote. x is read again after the barrier (at other threads' indices, so no
// optimiser can reuse the first loads). Parameters: x, out1, out2 (the buffers of
// `param_nodes`), workspace.
CompiledKernel Exchange(std::vector<int> param_nodes = {}) {
  const std::string ir = std::string(R"(
define void @ws_exchange(ptr noalias readonly %x, ptr %out1, ptr %out2, ptr %ws) {
entry:)") + kIndices + R"(
  %px = getelementptr inbounds i32, ptr %x, i64 %i64
  %xv = load i32, ptr %px, align 4
  %t = shl i32 %xv, 1
  %p1 = getelementptr inbounds i32, ptr %out1, i64 %i64
  store i32 %t, ptr %p1, align 4
  %scratch = getelementptr inbounds i8, ptr %ws, i64 256
  %ps = getelementptr inbounds i32, ptr %scratch, i64 %i64
  %t1 = add i32 %t, 1
  store i32 %t1, ptr %ps, align 4
  call void @stitch.grid.sync(ptr %ws)
  %q1 = getelementptr inbounds i32, ptr %out1, i64 %j64
  %a = load i32, ptr %q1, align 4
  %qs = getelementptr inbounds i32, ptr %scratch, i64 %j64
  %b = load i32, ptr %qs, align 4
  %qx = getelementptr inbounds i32, ptr %x, i64 %j64
  %c = load i32, ptr %qx, align 4
  %s1 = add i32 %a, %b
  %s2 = add i32 %s1, %c
  %p2 = getelementptr inbounds i32, ptr %out2, i64 %i64
  store i32 %s2, ptr %p2, align 4
  ret void
}
)";
  CompiledKernel k;
  k.name = "ws_exchange";
  k.launch.grid = {kBlocks, 1, 1};
  k.launch.block = {kThreads, 1, 1};
  k.portable_ir = ToBitcode(ir);
  k.param_nodes = std::move(param_nodes);
  k.workspace_bytes = kScratchOffset + 4 * kN;
  return k;
}

// The buffers RunOnEmulator needs: x (s32[n], parameter 0) and two s32[n] outputs.
// RunOnEmulator reads only the graph's parameters, outputs and shapes; the ops of the output
// nodes stand in for what the kernel computes.
struct ExchangeGraph {
  Graph g;
  int x = -1, out1 = -1, out2 = -1;
};

ExchangeGraph MakeGraph() {
  ExchangeGraph e;
  Shape shape;
  shape.dtype = DType::kS32;
  shape.dims = {static_cast<int64_t>(kN)};
  Node x;
  x.name = "x";
  x.op = OpCode::kParameter;
  x.shape = shape;
  x.parameter_number = 0;
  e.x = e.g.Add(x);
  Node out;
  out.op = OpCode::kAdd;
  out.shape = shape;
  out.operands = {e.x, e.x};
  out.name = "out1";
  e.out1 = e.g.Add(out);
  out.name = "out2";
  e.out2 = e.g.Add(out);
  e.g.outputs = {e.out1, e.out2};
  return e;
}

Tensor Input() {
  Shape shape;
  shape.dtype = DType::kS32;
  shape.dims = {static_cast<int64_t>(kN)};
  std::vector<int32_t> values(kN);
  for (uint64_t i = 0; i < kN; ++i) values[i] = static_cast<int32_t>(7 * i) - 1000;
  std::vector<uint8_t> bytes(values.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  StatusOr<Tensor> t = FromDeviceBytes(shape, bytes);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::vector<int32_t> Values(const Tensor& t) {
  const std::vector<uint8_t> bytes = ToDeviceBytes(t);
  std::vector<int32_t> out(bytes.size() / sizeof(int32_t));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::unique_ptr<Emulator> NewEmulator(bool random_order, uint64_t seed, bool footprint) {
  EmulatorOptions options;
  options.random_order = random_order;
  options.seed = seed;
  options.count_footprint = footprint;
  auto emu = Emulator::Create(options);
  EXPECT_TRUE(emu.ok()) << emu.status().ToString();
  return emu.ok() ? std::move(emu).value() : nullptr;
}

// Checks both outputs of an exchange run against x.
void ExpectExchanged(const EmulatedRun& run, const Tensor& x) {
  ASSERT_EQ(run.outputs.size(), 2u);
  const std::vector<int32_t> in = Values(x);
  const std::vector<int32_t> out1 = Values(run.outputs[0]);
  const std::vector<int32_t> out2 = Values(run.outputs[1]);
  ASSERT_EQ(out1.size(), kN);
  ASSERT_EQ(out2.size(), kN);
  for (uint64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(out1[i], 2 * in[i]) << i;
    ASSERT_EQ(out2[i], 5 * in[(i + kThreads) % kN] + 1) << i;
  }
}

TEST(EmulatorWorkspace, RunOnEmulatorPassesAZeroFilledWorkspace) {
  const ExchangeGraph e = MakeGraph();
  const CompiledKernel k = Exchange({e.x, e.out1, e.out2});
  const Tensor x = Input();
  for (uint64_t seed : {0, 3, 4}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto emu = NewEmulator(seed != 0, seed, false);
    ASSERT_NE(emu, nullptr);
    // Twice on one emulator (the compiled kernel is reused, each run has its own
    // workspace), then with the kernel launched twice in one run.
    for (int round = 0; round < 2; ++round) {
      StatusOr<EmulatedRun> run = RunOnEmulator(e.g, {k}, {x}, *emu);
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      ExpectExchanged(*run, x);
      ASSERT_EQ(run->per_kernel.size(), 1u);
      EXPECT_EQ(run->per_kernel[0].grid_barriers, 1u);
    }
    StatusOr<EmulatedRun> run = RunOnEmulator(e.g, {k, k}, {x}, *emu);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ExpectExchanged(*run, x);
    ASSERT_EQ(run->per_kernel.size(), 2u);
    for (const LaunchStats& s : run->per_kernel) EXPECT_EQ(s.grid_barriers, 1u);
  }
}

TEST(EmulatorWorkspace, FootprintRestartsAtTheGridBarrierAndCountsTheWorkspace) {
  const ExchangeGraph e = MakeGraph();
  const CompiledKernel k = Exchange({e.x, e.out1, e.out2});
  const Tensor x = Input();
  for (uint64_t seed : {0, 5}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto emu = NewEmulator(seed != 0, seed, true);
    ASSERT_NE(emu, nullptr);
    StatusOr<EmulatedRun> run = RunOnEmulator(e.g, {k}, {x}, *emu);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ExpectExchanged(*run, x);
    const LaunchStats& s = run->per_kernel.at(0);
    const uint64_t buffer = 4 * kN;  // bytes of x, out1, out2 and the scratch
    // Phase 1 loads x; phase 2 loads out1, the scratch and x again: x counts twice. The
    // scratch in the workspace is traffic like any buffer's.
    EXPECT_EQ(s.footprint_bytes_loaded, 4 * buffer);
    // Phase 1 stores out1 and the scratch, phase 2 out2.
    EXPECT_EQ(s.footprint_bytes_stored, 3 * buffer);
    // Byte counts take every access of the kernel, the workspace's included: x, then out1,
    // scratch and x loaded; out1 and scratch, then out2 stored.
    EXPECT_EQ(s.global_bytes_loaded, 4 * buffer);
    EXPECT_EQ(s.global_bytes_stored, 3 * buffer);
  }
}

// out[i] = x[i] + x[j]: every element of x is loaded twice, in one phase.
TEST(EmulatorWorkspace, WithoutGridBarriersEachSectorCountsOnce) {
  const std::string ir = std::string(R"(
define void @twice(ptr noalias readonly %x, ptr noalias %out) {
entry:)") + kIndices + R"(
  %px = getelementptr inbounds i32, ptr %x, i64 %i64
  %a = load i32, ptr %px, align 4
  %qx = getelementptr inbounds i32, ptr %x, i64 %j64
  %b = load i32, ptr %qx, align 4
  %s = add i32 %a, %b
  %po = getelementptr inbounds i32, ptr %out, i64 %i64
  store i32 %s, ptr %po, align 4
  ret void
}
)";
  CompiledKernel k;
  k.name = "twice";
  k.launch.grid = {kBlocks, 1, 1};
  k.launch.block = {kThreads, 1, 1};
  k.portable_ir = ToBitcode(ir);
  auto emu = NewEmulator(false, 0, true);
  ASSERT_NE(emu, nullptr);
  std::vector<int32_t> storage(2 * kN + 64, 0);
  // 256-byte-aligned x and out inside one allocation, so whole sectors are counted.
  const uintptr_t raw = reinterpret_cast<uintptr_t>(storage.data());
  auto* x = reinterpret_cast<int32_t*>((raw + 255) / 256 * 256);
  int32_t* out = x + kN;
  for (uint64_t i = 0; i < kN; ++i) x[i] = static_cast<int32_t>(i);
  StatusOr<LaunchStats> s = emu->Launch(k, {x, out});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], x[i] + x[(i + kThreads) % kN]) << i;
  EXPECT_EQ(s->footprint_bytes_loaded, 4 * kN);
  EXPECT_EQ(s->footprint_bytes_stored, 4 * kN);
  EXPECT_EQ(s->global_bytes_loaded, 8 * kN);
  EXPECT_EQ(s->grid_barriers, 0u);
}

// A workspace the caller owns: zero-filled once, reused as it is by the next launch.
TEST(EmulatorWorkspace, LaunchesReuseTheWorkspaceAsItIs) {
  const CompiledKernel k = Exchange();
  auto emu = NewEmulator(false, 0, false);
  ASSERT_NE(emu, nullptr);
  std::vector<int32_t> x(kN), out1(kN), out2(kN);
  for (uint64_t i = 0; i < kN; ++i) x[i] = static_cast<int32_t>(i);
  auto* workspace =
      static_cast<uint8_t*>(std::aligned_alloc(256, static_cast<size_t>(k.workspace_bytes)));
  ASSERT_NE(workspace, nullptr);
  std::memset(workspace, 0, static_cast<size_t>(k.workspace_bytes));
  for (uint32_t launch = 1; launch <= 2; ++launch) {
    std::fill(out2.begin(), out2.end(), -1);
    StatusOr<LaunchStats> s = emu->Launch(k, {x.data(), out1.data(), out2.data(), workspace});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (uint64_t i = 0; i < kN; ++i) ASSERT_EQ(out2[i], 5 * x[(i + kThreads) % kN] + 1) << i;
    // The arrival count is back at 0, and the phase in the top bit flipped once (one
    // barrier a launch).
    uint32_t arrivals;
    std::memcpy(&arrivals, workspace, sizeof(arrivals));
    EXPECT_EQ(arrivals, launch % 2 == 1 ? 0x80000000u : 0u);
  }
  // The workspace must be 256-byte aligned, as the GPU's allocations are.
  StatusOr<LaunchStats> s = emu->Launch(k, {x.data(), out1.data(), out2.data(), workspace + 4});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
  std::free(workspace);
}

TEST(EmulatorWorkspace, AKernelWithoutTheWorkspaceParameterIsRefused) {
  // workspace_bytes says there is a trailing parameter, the IR has none: RunOnEmulator's
  // extra argument does not match.
  const std::string ir = std::string(R"(
define void @no_ws(ptr noalias readonly %x, ptr %out1, ptr %out2) {
entry:
  ret void
}
)");
  CompiledKernel k;
  k.name = "no_ws";
  k.launch.grid = {1, 1, 1};
  k.launch.block = {32, 1, 1};
  k.portable_ir = ToBitcode(ir);
  k.workspace_bytes = 8;
  const ExchangeGraph e = MakeGraph();
  k.param_nodes = {e.x, e.out1, e.out2};
  auto emu = NewEmulator(false, 0, false);
  ASSERT_NE(emu, nullptr);
  StatusOr<EmulatedRun> run = RunOnEmulator(e.g, {k}, {Input()}, *emu);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument) << run.status().ToString();
}

}  // namespace
}  // namespace stitch
