// Tests of stitch/emulator/emulator.h. Kernels are written as LLVM IR text that follows the
// portable-IR contract of codegen.h (nvptx64 triple, NVVM intrinsics, addrspace(3) shared
// memory, libdevice calls) and turned into bitcode here.
#include "stitch/emulator/emulator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "support/llvm_text.h"

namespace stitch {
namespace {

const char* const kHeader = R"(
target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.z()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.z()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.z()
declare void @llvm.nvvm.barrier0()
)";

// Returns the bitcode of `ir` (kHeader prepended), or "" after reporting a parse error.
std::string ToBitcode(const std::string& ir) { return testing::TextIrToBitcode(kHeader + ir); }

CompiledKernel MakeKernel(const std::string& name, const std::string& ir,
                          std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block) {
  CompiledKernel k;
  k.name = name;
  k.launch.grid = grid;
  k.launch.block = block;
  k.portable_ir = ToBitcode(ir);
  return k;
}

std::unique_ptr<Emulator> NewEmulator(bool random_order = false, uint64_t seed = 0) {
  EmulatorOptions options;
  options.random_order = random_order;
  options.seed = seed;
  auto emu = Emulator::Create(options);
  EXPECT_TRUE(emu.ok()) << emu.status().ToString();
  return emu.ok() ? std::move(emu).value() : nullptr;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

// Grid-stride y = 2.5 * x + b; x is read through an addrspace(1) pointer as the codegen
// does for global memory.
const char* const kAxpb = R"(
define void @axpb(ptr %x, ptr %b, ptr %y) {
entry:
  %xg = addrspacecast ptr %x to ptr addrspace(1)
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nctaid = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %base = mul i32 %ctaid, %ntid
  %start = add i32 %base, %tid
  %stride = mul i32 %ntid, %nctaid
  %s64 = zext i32 %start to i64
  %st64 = zext i32 %stride to i64
  br label %cond
cond:
  %i = phi i64 [ %s64, %entry ], [ %next, %body ]
  %in = icmp slt i64 %i, N
  br i1 %in, label %body, label %done
body:
  %px = getelementptr inbounds float, ptr addrspace(1) %xg, i64 %i
  %vx = load float, ptr addrspace(1) %px, align 4
  %pb = getelementptr inbounds float, ptr %b, i64 %i
  %vb = load float, ptr %pb, align 4
  %m = fmul float %vx, 2.5
  %r = fadd float %m, %vb
  %py = getelementptr inbounds float, ptr %y, i64 %i
  store float %r, ptr %py, align 4
  %next = add i64 %i, %st64
  br label %cond
done:
  ret void
}
!nvvm.annotations = !{!0}
!0 = !{ptr @axpb, !"kernel", i32 1}
)";

TEST(EmulatorTest, GridStrideElementwiseAndByteCounts) {
  constexpr int64_t n = 100003;
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k =
      MakeKernel("axpb", Replace(kAxpb, "N", std::to_string(n)), {37, 1, 1}, {128, 1, 1});
  std::vector<float> x(n), b(n), y(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 7) - 3.0f;
  }
  for (int rep = 0; rep < 2; ++rep) {  // the second launch hits the compiled-kernel cache
    auto stats = emu->Launch(k, {x.data(), b.data(), y.data()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->global_bytes_loaded, uint64_t{2 * 4 * n});
    EXPECT_EQ(stats->global_bytes_stored, uint64_t{4 * n});
    EXPECT_EQ(stats->barriers, 0u);
    EXPECT_EQ(stats->threads, 37u * 128u);
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.5f * x[i] + b[i]) << i;
}

// Sum of each block's 256 inputs by a tree in shared memory. BARRIER is a barrier0 call in
// the correct kernel and nothing in the racy one.
const char* const kBlockSum = R"(
@smem = internal addrspace(3) global [256 x float] undef, align 4
define void @block_sum(ptr %in, ptr %out) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %base = mul i32 %ctaid, 256
  %gi = add i32 %base, %tid
  %gi64 = zext i32 %gi to i64
  %pin = getelementptr inbounds float, ptr %in, i64 %gi64
  %v = load float, ptr %pin, align 4
  %sp = getelementptr inbounds [256 x float], ptr addrspace(3) @smem, i32 0, i32 %tid
  store float %v, ptr addrspace(3) %sp, align 4
  BARRIER
  br label %loop
loop:
  %s = phi i32 [ 128, %entry ], [ %s2, %latch ]
  %act = icmp ult i32 %tid, %s
  br i1 %act, label %add, label %latch
add:
  %oi = add i32 %tid, %s
  %op = getelementptr inbounds [256 x float], ptr addrspace(3) @smem, i32 0, i32 %oi
  %a = load float, ptr addrspace(3) %sp, align 4
  %o = load float, ptr addrspace(3) %op, align 4
  %sum = fadd float %a, %o
  store float %sum, ptr addrspace(3) %sp, align 4
  br label %latch
latch:
  BARRIER
  %s2 = lshr i32 %s, 1
  %more = icmp ne i32 %s2, 0
  br i1 %more, label %loop, label %done
done:
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %exit
write:
  %gs = addrspacecast ptr addrspace(3) @smem to ptr
  %r = load float, ptr %gs, align 4
  %ctaid64 = zext i32 %ctaid to i64
  %pout = getelementptr inbounds float, ptr %out, i64 %ctaid64
  store float %r, ptr %pout, align 4
  br label %exit
exit:
  ret void
}
)";

constexpr uint32_t kSumBlocks = 24;

std::vector<float> SumInput() {
  std::vector<float> in(kSumBlocks * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 37) % 101);
  return in;
}

std::vector<float> SumExpected(const std::vector<float>& in) {
  std::vector<float> want(kSumBlocks, 0.0f);
  for (size_t i = 0; i < in.size(); ++i) want[i / 256] += in[i];
  return want;
}

TEST(EmulatorTest, SharedMemoryReductionWithBarriers) {
  const std::vector<float> in = SumInput();
  const std::vector<float> want = SumExpected(in);
  CompiledKernel k =
      MakeKernel("block_sum", Replace(kBlockSum, "BARRIER", "call void @llvm.nvvm.barrier0()"),
                 {kSumBlocks, 1, 1}, {256, 1, 1});
  for (bool random : {false, true}) {
    for (uint64_t seed : {1u, 2u, 3u, 4u}) {
      if (!random && seed > 1) continue;
      auto emu = NewEmulator(random, seed);
      ASSERT_NE(emu, nullptr);
      std::vector<float> out(kSumBlocks, -1.0f);
      auto stats = emu->Launch(k, {const_cast<float*>(in.data()), out.data()});
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      EXPECT_EQ(out, want) << "random=" << random << " seed=" << seed;
      EXPECT_EQ(stats->barriers, kSumBlocks * 9u);  // one after the stores, eight in the tree
      EXPECT_EQ(stats->global_bytes_loaded, kSumBlocks * 256u * 4u);
      EXPECT_EQ(stats->global_bytes_stored, kSumBlocks * 4u);  // shared memory is not counted
    }
  }
}

TEST(EmulatorTest, MissingBarrierGivesWrongAnswerInRandomOrder) {
  const std::vector<float> in = SumInput();
  const std::vector<float> want = SumExpected(in);
  CompiledKernel k =
      MakeKernel("block_sum", Replace(kBlockSum, "BARRIER", ""), {kSumBlocks, 1, 1}, {256, 1, 1});
  int mismatches = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto emu = NewEmulator(/*random_order=*/true, seed);
    ASSERT_NE(emu, nullptr);
    std::vector<float> out(kSumBlocks, -1.0f);
    auto stats = emu->Launch(k, {const_cast<float*>(in.data()), out.data()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->barriers, 0u);
    if (out != want) ++mismatches;
  }
  EXPECT_GT(mismatches, 0) << "the race went unnoticed";
}

// Warp exchanges over two warps: a shfl.down tree (sum at lane 0), a bfly all-reduce, an
// idx broadcast of lane 3 and shfl.up.p by one lane (lane 0 keeps its value, pred false).
const char* const kShuffle = R"(
declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)
declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)
declare float @llvm.nvvm.shfl.sync.idx.f32(i32, float, i32, i32)
declare { float, i1 } @llvm.nvvm.shfl.sync.up.f32p(i32, float, i32, i32)
define void @shuffles(ptr %in, ptr %sum, ptr %all, ptr %bcast, ptr %up, ptr %pred) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t64 = zext i32 %tid to i64
  %pin = getelementptr inbounds i32, ptr %in, i64 %t64
  %v = load i32, ptr %pin, align 4
  %d16 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %v, i32 16, i32 31)
  %a16 = add i32 %v, %d16
  %d8 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %a16, i32 8, i32 31)
  %a8 = add i32 %a16, %d8
  %d4 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %a8, i32 4, i32 31)
  %a4 = add i32 %a8, %d4
  %d2 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %a4, i32 2, i32 31)
  %a2 = add i32 %a4, %d2
  %d1 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %a2, i32 1, i32 31)
  %a1 = add i32 %a2, %d1
  %psum = getelementptr inbounds i32, ptr %sum, i64 %t64
  store i32 %a1, ptr %psum, align 4
  %f = sitofp i32 %v to float
  %b16 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %f, i32 16, i32 31)
  %c16 = fadd float %f, %b16
  %b8 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %c16, i32 8, i32 31)
  %c8 = fadd float %c16, %b8
  %b4 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %c8, i32 4, i32 31)
  %c4 = fadd float %c8, %b4
  %b2 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %c4, i32 2, i32 31)
  %c2 = fadd float %c4, %b2
  %b1 = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %c2, i32 1, i32 31)
  %c1 = fadd float %c2, %b1
  %pall = getelementptr inbounds float, ptr %all, i64 %t64
  store float %c1, ptr %pall, align 4
  %bc = call float @llvm.nvvm.shfl.sync.idx.f32(i32 -1, float %f, i32 3, i32 31)
  %pbc = getelementptr inbounds float, ptr %bcast, i64 %t64
  store float %bc, ptr %pbc, align 4
  %u = call { float, i1 } @llvm.nvvm.shfl.sync.up.f32p(i32 -1, float %f, i32 1, i32 0)
  %uv = extractvalue { float, i1 } %u, 0
  %up1 = extractvalue { float, i1 } %u, 1
  %pup = getelementptr inbounds float, ptr %up, i64 %t64
  store float %uv, ptr %pup, align 4
  %upz = zext i1 %up1 to i32
  %ppred = getelementptr inbounds i32, ptr %pred, i64 %t64
  store i32 %upz, ptr %ppred, align 4
  ret void
}
)";

TEST(EmulatorTest, WarpShuffles) {
  constexpr int n = 64;
  CompiledKernel k = MakeKernel("shuffles", kShuffle, {1, 1, 1}, {n, 1, 1});
  std::vector<int32_t> in(n), sum(n), pred(n);
  std::vector<float> all(n), bcast(n), up(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 7) % 23 + i / 32 * 100;
  for (bool random : {false, true}) {
    auto emu = NewEmulator(random, 5);
    ASSERT_NE(emu, nullptr);
    auto stats =
        emu->Launch(k, {in.data(), sum.data(), all.data(), bcast.data(), up.data(), pred.data()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    for (int w = 0; w < 2; ++w) {
      const int first = w * 32;
      const int total = std::accumulate(in.begin() + first, in.begin() + first + 32, 0);
      EXPECT_EQ(sum[first], total) << "warp " << w;
      for (int lane = 0; lane < 32; ++lane) {
        const int i = first + lane;
        EXPECT_EQ(all[i], static_cast<float>(total)) << i;
        EXPECT_EQ(bcast[i], static_cast<float>(in[first + 3])) << i;
        EXPECT_EQ(up[i], static_cast<float>(in[lane == 0 ? i : i - 1])) << i;
        EXPECT_EQ(pred[i], lane == 0 ? 0 : 1) << i;
      }
    }
  }
}

const char* const kMath = R"(
declare float @__nv_expf(float)
declare float @__nv_tanhf(float)
declare double @__nv_log(double)
define void @math(ptr %x, ptr %e, ptr %t, ptr %xd, ptr %l) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %i = zext i32 %tid to i64
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %v = load float, ptr %px, align 4
  %ev = call float @__nv_expf(float %v)
  %pe = getelementptr inbounds float, ptr %e, i64 %i
  store float %ev, ptr %pe, align 4
  %tv = call float @__nv_tanhf(float %v)
  %pt = getelementptr inbounds float, ptr %t, i64 %i
  store float %tv, ptr %pt, align 4
  %pxd = getelementptr inbounds double, ptr %xd, i64 %i
  %d = load double, ptr %pxd, align 8
  %lv = call double @__nv_log(double %d)
  %pl = getelementptr inbounds double, ptr %l, i64 %i
  store double %lv, ptr %pl, align 8
  ret void
}
)";

TEST(EmulatorTest, LibdeviceMathMatchesHostLibm) {
  constexpr int n = 96;
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("math", kMath, {1, 1, 1}, {n, 1, 1});
  std::vector<float> x(n), e(n), t(n);
  std::vector<double> xd(n), l(n);
  for (int i = 0; i < n; ++i) {
    x[i] = -6.0f + 0.125f * static_cast<float>(i);
    xd[i] = 0.001 + 1.7 * i;
  }
  auto stats = emu->Launch(k, {x.data(), e.data(), t.data(), xd.data(), l.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  for (int i = 0; i < n; ++i) {
    EXPECT_FLOAT_EQ(e[i], std::exp(x[i])) << x[i];
    EXPECT_FLOAT_EQ(t[i], std::tanh(x[i])) << x[i];
    EXPECT_DOUBLE_EQ(l[i], std::log(xd[i])) << xd[i];
  }
}

TEST(EmulatorTest, UnknownLibdeviceFunctionIsNamed) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("odd", R"(
declare float @__nv_no_such_thingf(float)
define void @odd(ptr %x) {
  %v = load float, ptr %x, align 4
  %r = call float @__nv_no_such_thingf(float %v)
  store float %r, ptr %x, align 4
  ret void
}
)",
                                {1, 1, 1}, {1, 1, 1});
  float x = 1.0f;
  auto stats = emu->Launch(k, {&x});
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("__nv_no_such_thingf"), std::string::npos)
      << stats.status().ToString();
}

// The portable IR's bf16 rounding (stitch.f32.to.bf16) runs on the host as the bits give it:
// to nearest even, ties to the even neighbour, overflow to infinity, a NaN kept a NaN.
TEST(EmulatorTest, Bf16RoundingIsNearestEven) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("to_bf16", R"(
declare i16 @stitch.f32.to.bf16(float)
define void @to_bf16(ptr %x, ptr %y) {
  %i = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %px = getelementptr float, ptr %x, i32 %i
  %py = getelementptr i16, ptr %y, i32 %i
  %v = load float, ptr %px, align 4
  %r = call i16 @stitch.f32.to.bf16(float %v)
  store i16 %r, ptr %py, align 2
  ret void
}
)",
                                {1, 1, 1}, {8, 1, 1});
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1); 1 + 3 x 2^-8 one between 1 + 2^-7 and
  // 1 + 2^-6 (even: 1 + 2^-6); just above a tie rounds up; the largest f32 overflows.
  const std::vector<float> x = {1.0f,
                                1.0f + 0x1p-8f,
                                1.0f + 3 * 0x1p-8f,
                                1.0f + 0x1p-8f + 0x1p-20f,
                                -2.5f,
                                3.4028235e38f,
                                std::numeric_limits<float>::quiet_NaN(),
                                -0.0f};
  const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0, 0x8000};
  std::vector<float> in = x;
  std::vector<uint16_t> out(x.size(), 0);
  auto stats = emu->Launch(k, {in.data(), out.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_EQ(out[i] & 0x7f80, 0x7f80) << i;
      EXPECT_NE(out[i] & 0x7f, 0) << i;
    } else {
      EXPECT_EQ(out[i], want[i]) << i << ": " << x[i];
    }
  }
}

TEST(EmulatorTest, Bf16RoundingOfAnotherTypeIsRefused) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("odd_bf16", R"(
declare i32 @stitch.f32.to.bf16(double)
define void @odd_bf16(ptr %x) {
  %v = load double, ptr %x, align 8
  %r = call i32 @stitch.f32.to.bf16(double %v)
  store i32 %r, ptr %x, align 4
  ret void
}
)",
                                {1, 1, 1}, {1, 1, 1});
  double x = 1.0;
  auto stats = emu->Launch(k, {&x});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kInvalidArgument) << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("stitch.f32.to.bf16"), std::string::npos)
      << stats.status().ToString();
}

// Value of IEEE binary16 `bits`.
double HalfValue(uint16_t bits) {
  const int exp = (bits >> 10) & 0x1f;
  const int mant = bits & 0x3ff;
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (exp == 0x1f) {
    return mant != 0 ? std::numeric_limits<double>::quiet_NaN()
                     : sign * std::numeric_limits<double>::infinity();
  }
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// `v` rounded to binary16 (nearest, ties to even), as a double.
double RoundToHalf(double v) {
  if (std::isnan(v) || std::isinf(v)) return v;
  const double a = std::fabs(v);
  if (a >= 65520.0) return std::copysign(std::numeric_limits<double>::infinity(), v);
  const int e = a == 0.0 ? -14 : std::max(std::ilogb(a), -14);
  const double scaled = std::ldexp(a, 10 - e);  // the mantissa grid is 2^(e-10)
  return std::copysign(std::ldexp(std::nearbyint(scaled), e - 10), v);
}

const char* const kHalf = R"(
define void @halves(ptr %in16, ptr %out16, ptr %ind, ptr %outd16) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %b = mul i32 %ctaid, %ntid
  %gi = add i32 %b, %tid
  %i = zext i32 %gi to i64
  %pin = getelementptr inbounds half, ptr %in16, i64 %i
  %h = load half, ptr %pin, align 2
  %f = fpext half %h to float
  %m = fmul float %f, 1.5
  %a = fadd float %m, 0.25
  %t = fptrunc float %a to half
  %pout = getelementptr inbounds half, ptr %out16, i64 %i
  store half %t, ptr %pout, align 2
  %in_range = icmp ult i64 %i, ND
  br i1 %in_range, label %dbl, label %done
dbl:
  %pd = getelementptr inbounds double, ptr %ind, i64 %i
  %d = load double, ptr %pd, align 8
  %td = fptrunc double %d to half
  %pod = getelementptr inbounds half, ptr %outd16, i64 %i
  store half %td, ptr %pod, align 2
  br label %done
done:
  ret void
}
)";

TEST(EmulatorTest, HalfLoadComputeStore) {
  // Every binary16 bit pattern through fpext/compute/fptrunc, plus doubles narrowed
  // straight to half (no double rounding through float).
  const std::vector<double> doubles = {
      1.0 + std::ldexp(1, -11),                       // tie: stays 1
      1.0 + 3 * std::ldexp(1, -11),                   // tie: rounds up to even
      1.0 + std::ldexp(1, -11) + std::ldexp(1, -40),  // just above a tie
      std::ldexp(1, -24),
      std::ldexp(1, -25),
      1.5 * std::ldexp(1, -25),
      std::ldexp(1, -30),
      65504.0,
      65519.0,
      65520.0,
      -0.0,
      -3.14159,
      1e-30,
      2.5e-5,
      1e300};
  constexpr int n = 65536;
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("halves", Replace(kHalf, "ND", std::to_string(doubles.size())),
                                {n / 256, 1, 1}, {256, 1, 1});
  std::vector<uint16_t> in(n), out(n), outd(doubles.size());
  std::iota(in.begin(), in.end(), 0);
  std::vector<double> ind = doubles;
  auto stats = emu->Launch(k, {in.data(), out.data(), ind.data(), outd.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  for (int i = 0; i < n; ++i) {
    const double x = HalfValue(static_cast<uint16_t>(i));
    const float f = static_cast<float>(x) * 1.5f + 0.25f;
    const double want = RoundToHalf(f);
    const double got = HalfValue(out[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << i;
    } else {
      ASSERT_EQ(got, want) << "input bits " << i;
    }
  }
  for (size_t i = 0; i < doubles.size(); ++i) {
    const double want = RoundToHalf(doubles[i]);
    EXPECT_EQ(HalfValue(outd[i]), want) << doubles[i];
    EXPECT_EQ(std::signbit(HalfValue(outd[i])), std::signbit(want)) << doubles[i];
  }
}

TEST(EmulatorTest, DivergentBarrierIsADeadlock) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  // Threads 0..31 wait at the barrier inside the branch, 32..63 at the one after it.
  CompiledKernel k = MakeKernel("divergent", R"(
define void @divergent(ptr %x) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %low = icmp ult i32 %tid, 32
  br i1 %low, label %then, label %join
then:
  call void @llvm.nvvm.barrier0()
  br label %join
join:
  call void @llvm.nvvm.barrier0()
  ret void
}
)",
                                {2, 1, 1}, {64, 1, 1});
  float x = 0;
  auto stats = emu->Launch(k, {&x});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kInternal);
  EXPECT_NE(stats.status().message().find("deadlock in block (0,0,0)"), std::string::npos)
      << stats.status().ToString();

  // The emulator stays usable after a deadlock.
  std::vector<float> xs(1000), bs(1000), ys(1000);
  CompiledKernel ok = MakeKernel("axpb", Replace(kAxpb, "N", "1000"), {2, 1, 1}, {64, 1, 1});
  auto again = emu->Launch(ok, {xs.data(), bs.data(), ys.data()});
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST(EmulatorTest, WarpOperationAgainstBarrierIsADeadlock) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  // Lanes 0..15 shuffle while lanes 16..31 wait at a barrier: neither can complete.
  CompiledKernel k = MakeKernel("mixed", R"(
declare i32 @llvm.nvvm.shfl.sync.idx.i32(i32, i32, i32, i32)
define void @mixed(ptr %x) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %low = icmp ult i32 %tid, 16
  br i1 %low, label %then, label %else
then:
  %v = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 %tid, i32 0, i32 31)
  store i32 %v, ptr %x, align 4
  ret void
else:
  call void @llvm.nvvm.barrier0()
  ret void
}
)",
                                {1, 1, 1}, {32, 1, 1});
  int32_t x = 0;
  auto stats = emu->Launch(k, {&x});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kInternal);
  EXPECT_NE(stats.status().message().find("deadlock"), std::string::npos)
      << stats.status().ToString();
}

TEST(EmulatorTest, BarrierAfterEarlyExitAndVotes) {
  // Threads >= 40 return before the barrier; the rest still meet there (a barrier waits
  // for the threads that have not exited). Then a ballot and a barrier popc.
  auto emu = NewEmulator(/*random_order=*/true, 9);
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("votes", R"(
declare i32 @llvm.nvvm.vote.ballot.sync(i32, i1)
declare i32 @llvm.nvvm.barrier0.popc(i32)
define void @votes(ptr %ballot, ptr %popc) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %early = icmp uge i32 %tid, 40
  br i1 %early, label %exit, label %work
work:
  call void @llvm.nvvm.barrier0()
  %odd = trunc i32 %tid to i1
  %b = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 %odd)
  %t64 = zext i32 %tid to i64
  %pb = getelementptr inbounds i32, ptr %ballot, i64 %t64
  store i32 %b, ptr %pb, align 4
  %small = icmp ult i32 %tid, 10
  %sz = zext i1 %small to i32
  %c = call i32 @llvm.nvvm.barrier0.popc(i32 %sz)
  %pc = getelementptr inbounds i32, ptr %popc, i64 %t64
  store i32 %c, ptr %pc, align 4
  br label %exit
exit:
  ret void
}
)",
                                {1, 1, 1}, {64, 1, 1});
  std::vector<uint32_t> ballot(64, 7), popc(64, 7);
  auto stats = emu->Launch(k, {ballot.data(), popc.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->barriers, 2u);
  for (int i = 0; i < 64; ++i) {
    if (i >= 40) {
      EXPECT_EQ(ballot[i], 7u);
      continue;
    }
    // Warp 1 has lanes 32..39 left: odd lanes 1, 3, 5, 7.
    EXPECT_EQ(ballot[i], i < 32 ? 0xaaaaaaaau : 0xaau) << i;
    EXPECT_EQ(popc[i], 10u) << i;
  }
}

TEST(EmulatorTest, TrapFailsTheLaunch) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("trapper", R"(
declare void @llvm.trap()
define void @trapper(ptr %x) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bad = icmp eq i32 %tid, 5
  br i1 %bad, label %trap, label %ok
trap:
  call void @llvm.trap()
  unreachable
ok:
  ret void
}
)",
                                {1, 1, 1}, {32, 1, 1});
  float x = 0;
  auto stats = emu->Launch(k, {&x});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kInternal);
  EXPECT_NE(stats.status().message().find("(5,0,0) executed llvm.trap"), std::string::npos)
      << stats.status().ToString();
}

TEST(EmulatorTest, WrongArgumentCount) {
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("axpb", Replace(kAxpb, "N", "10"), {1, 1, 1}, {32, 1, 1});
  float x[10] = {}, y[10] = {};
  auto stats = emu->Launch(k, {x, y});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kInvalidArgument) << stats.status().ToString();

  CompiledKernel bad = k;
  bad.portable_ir = "not bitcode";
  EXPECT_EQ(emu->Launch(bad, {x, x, y}).status().code(), StatusCode::kInvalidArgument);
}

const char* const kIds = R"(
define void @ids(ptr %out) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ty = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  %tz = call i32 @llvm.nvvm.read.ptx.sreg.tid.z()
  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %by = call i32 @llvm.nvvm.read.ptx.sreg.ntid.y()
  %bz = call i32 @llvm.nvvm.read.ptx.sreg.ntid.z()
  %cx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %cy = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
  %cz = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()
  %gx = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %gy = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.y()
  %blk0 = mul i32 %cz, %gy
  %blk1 = add i32 %blk0, %cy
  %blk2 = mul i32 %blk1, %gx
  %blk = add i32 %blk2, %cx
  %bt0 = mul i32 %bx, %by
  %bt = mul i32 %bt0, %bz
  %t0 = mul i32 %tz, %by
  %t1 = add i32 %t0, %ty
  %t2 = mul i32 %t1, %bx
  %t = add i32 %t2, %tx
  %g0 = mul i32 %blk, %bt
  %g = add i32 %g0, %t
  %p0 = shl i32 %ty, 4
  %p1 = shl i32 %tz, 8
  %p2 = shl i32 %cx, 12
  %p3 = shl i32 %cy, 16
  %p4 = shl i32 %cz, 20
  %q0 = or i32 %tx, %p0
  %q1 = or i32 %q0, %p1
  %q2 = or i32 %q1, %p2
  %q3 = or i32 %q2, %p3
  %q4 = or i32 %q3, %p4
  %g64 = zext i32 %g to i64
  %pout = getelementptr inbounds i32, ptr %out, i64 %g64
  store i32 %q4, ptr %pout, align 4
  ret void
}
)";

TEST(EmulatorTest, ThreeDimensionalIds) {
  const std::array<uint32_t, 3> grid = {2, 3, 2}, block = {4, 2, 3};
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k = MakeKernel("ids", kIds, grid, block);
  std::vector<uint32_t> out(k.launch.threads(), 0xffffffffu);
  auto stats = emu->Launch(k, {out.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->threads, out.size());
  size_t i = 0;
  for (uint32_t cz = 0; cz < grid[2]; ++cz)
    for (uint32_t cy = 0; cy < grid[1]; ++cy)
      for (uint32_t cx = 0; cx < grid[0]; ++cx)
        for (uint32_t tz = 0; tz < block[2]; ++tz)
          for (uint32_t ty = 0; ty < block[1]; ++ty)
            for (uint32_t tx = 0; tx < block[0]; ++tx, ++i) {
              const uint32_t want = tx | ty << 4 | tz << 8 | cx << 12 | cy << 16 | cz << 20;
              ASSERT_EQ(out[i], want) << i;
            }
}

TEST(EmulatorTest, ThroughputOneElementPerThread) {
  // One element per thread, 2^20 threads: reports the emulation rate.
  constexpr int64_t n = 1 << 20;
  auto emu = NewEmulator();
  ASSERT_NE(emu, nullptr);
  CompiledKernel k =
      MakeKernel("axpb", Replace(kAxpb, "N", std::to_string(n)), {n / 256, 1, 1}, {256, 1, 1});
  std::vector<float> x(n, 1.0f), b(n, 2.0f), y(n);
  ASSERT_TRUE(emu->Launch(k, {x.data(), b.data(), y.data()}).ok());  // compile outside timing
  const auto start = std::chrono::steady_clock::now();
  auto stats = emu->Launch(k, {x.data(), b.data(), y.data()});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(y[n - 1], 4.5f);
  std::printf("emulated %llu threads in %.3f s (%.1f M threads/s)\n",
              static_cast<unsigned long long>(stats->threads), s, stats->threads / s / 1e6);
}

}  // namespace
}  // namespace stitch
