// Tests of the emulator's sector counting (EmulatorOptions::count_sectors): bytes fetched per
// warp access against bytes used, and re-reads through the LRU model of L2. Kernels are
// LLVM IR text in the portable-IR form of codegen.h, as in emulator_test.cc: one thread per
// element, each loading one element from `x` at an index the test chooses and storing it to
// `y` at its own index.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stitch/emulator/emulator.h"
#include "support/llvm_text.h"

namespace stitch {
namespace {

const char* const kHeader = R"(
target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
)";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

// The global thread index %i, from %tid, %ntid and %ctaid, which every kernel below starts
// with (at GLOBAL_THREAD).
const char* const kThreadIndex = R"(  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %base = mul i32 %ctaid, %ntid
  %i = add i32 %base, %tid)";

// The bitcode of a module of the header's declarations and kernel text `ir`.
std::string KernelBitcode(const std::string& ir) {
  return testing::TextIrToBitcode(kHeader + Replace(ir, "GLOBAL_THREAD", kThreadIndex));
}

// y[i] = x[SOURCE] for the global thread index i; ELEM is the element type, SOURCE an i32
// value computed by INDEX from %tid, %ntid, %ctaid and %i.
const char* const kGather = R"(
define void @gather(ptr %x, ptr %y) {
entry:
GLOBAL_THREAD
INDEX
  %s64 = zext i32 %SOURCE to i64
  %px = getelementptr inbounds ELEM, ptr %x, i64 %s64
  %v = load ELEM, ptr %px
  %i64 = zext i32 %i to i64
  %py = getelementptr inbounds ELEM, ptr %y, i64 %i64
  store ELEM %v, ptr %py
  ret void
}
)";

CompiledKernel Gather(const std::string& elem, const std::string& index, const std::string& source,
                      uint32_t blocks, uint32_t threads) {
  std::string ir = Replace(kGather, "ELEM", elem);
  ir = Replace(ir, "INDEX", index);
  ir = Replace(ir, "SOURCE", source);
  CompiledKernel k;
  k.name = "gather";
  k.launch.grid = {blocks, 1, 1};
  k.launch.block = {threads, 1, 1};
  k.portable_ir = KernelBitcode(ir);
  return k;
}

std::unique_ptr<Emulator> SectorEmulator(uint64_t window_bytes) {
  EmulatorOptions options;
  options.count_sectors = true;
  options.reuse_window_bytes = window_bytes;
  auto emu = Emulator::Create(options);
  EXPECT_TRUE(emu.ok()) << emu.status().ToString();
  return emu.ok() ? std::move(emu).value() : nullptr;
}

// Buffers on 256-byte boundaries, as the GPU's, so that sectors are the GPU's.
struct Buffer {
  explicit Buffer(uint64_t bytes) : words((bytes + 255) / 256 * 32 + 32, 0) {}
  void* data() {
    const uintptr_t raw = reinterpret_cast<uintptr_t>(words.data());
    return words.data() + (256 - raw % 256) % 256 / sizeof(uint64_t);
  }
  std::vector<uint64_t> words;
};

void Print(const char* what, const LaunchStats& s) {
  auto line = [&](const char* kind, const SectorTraffic& t) {
    std::printf(
        "%s %s: %llu warp accesses, used %llu B, fetched %llu B, DRAM %llu B, distinct "
        "%llu B, re-read %llu B\n",
        what, kind, static_cast<unsigned long long>(t.warp_accesses),
        static_cast<unsigned long long>(t.used_bytes),
        static_cast<unsigned long long>(t.fetched_bytes),
        static_cast<unsigned long long>(t.dram_bytes),
        static_cast<unsigned long long>(t.distinct_bytes),
        static_cast<unsigned long long>(t.reread_bytes));
  };
  line("loads", s.sector_loads);
  line("stores", s.sector_stores);
}

// Launches the gather `k` on (x, y) under an L2 window of `window` bytes; prints and returns
// its stats (none, with the failure recorded, where it could not run).
std::optional<LaunchStats> LaunchInWindow(const CompiledKernel& k, uint64_t window, void* x,
                                          void* y) {
  auto emu = SectorEmulator(window);
  if (emu == nullptr) return std::nullopt;
  auto stats = emu->Launch(k, {x, y});
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  if (!stats.ok()) return std::nullopt;
  Print(("window " + std::to_string(window)).c_str(), *stats);
  return *std::move(stats);
}

constexpr uint32_t kBlocks = 16;
constexpr uint32_t kThreads = 128;
constexpr uint64_t kElements = uint64_t{kBlocks} * kThreads;

TEST(EmulatorSectorTest, CoalescedAccessesFetchWhatTheyUse) {
  for (const auto& [elem, bytes] : {std::pair<std::string, uint64_t>{"float", 4}, {"i16", 2}}) {
    SCOPED_TRACE(elem);
    auto emu = SectorEmulator(uint64_t{1} << 20);
    ASSERT_NE(emu, nullptr);
    Buffer x(kElements * bytes), y(kElements * bytes);
    const CompiledKernel k = Gather(elem, "", "i", kBlocks, kThreads);
    auto stats = emu->Launch(k, {x.data(), y.data()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    Print(elem.c_str(), *stats);
    const uint64_t total = kElements * bytes;
    for (const SectorTraffic* t : {&stats->sector_loads, &stats->sector_stores}) {
      EXPECT_EQ(t->warp_accesses, kElements / 32);
      EXPECT_EQ(t->used_bytes, total);
      EXPECT_EQ(t->fetched_bytes, total);
      EXPECT_EQ(t->distinct_bytes, total);
      EXPECT_EQ(t->dram_bytes, total);
      EXPECT_EQ(t->reread_bytes, 0u);
    }
  }
}

TEST(EmulatorSectorTest, TransposedReadFetchesASectorPerLane) {
  // x is [kThreads, kBlocks] (row-major, kBlocks columns) read transposed: thread (tid, b)
  // reads x[tid][b], so the lanes of a warp are a row apart, each in a sector of its own.
  for (const auto& [elem, bytes] : {std::pair<std::string, uint64_t>{"float", 4}, {"i16", 2}}) {
    SCOPED_TRACE(elem);
    auto emu = SectorEmulator(uint64_t{1} << 20);
    ASSERT_NE(emu, nullptr);
    Buffer x(kElements * bytes), y(kElements * bytes);
    const CompiledKernel k = Gather(
        elem,
        "  %row = mul i32 %tid, " + std::to_string(kBlocks) + "\n  %src = add i32 %row, %ctaid",
        "src", kBlocks, kThreads);
    auto stats = emu->Launch(k, {x.data(), y.data()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    Print(elem.c_str(), *stats);
    const uint64_t total = kElements * bytes;
    const SectorTraffic& loads = stats->sector_loads;
    EXPECT_EQ(loads.used_bytes, total);
    EXPECT_EQ(loads.fetched_bytes, total * (32 / bytes));  // 8x for f32, 16x for bf16
    // Every block fetches all of x's sectors again, but x (4 or 8 KiB) stays in the window.
    EXPECT_EQ(loads.distinct_bytes, total);
    EXPECT_EQ(loads.dram_bytes, total);
    EXPECT_EQ(stats->sector_stores.fetched_bytes, total);
    // With a window of one sector the later blocks' re-reads go to DRAM.
    auto tiny = SectorEmulator(32);
    ASSERT_NE(tiny, nullptr);
    auto again = tiny->Launch(k, {x.data(), y.data()});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    Print((elem + ", 32-byte window").c_str(), *again);
    EXPECT_EQ(again->sector_loads.fetched_bytes, loads.fetched_bytes);
    EXPECT_EQ(again->sector_loads.dram_bytes, loads.fetched_bytes);
    EXPECT_EQ(again->sector_loads.reread_bytes, loads.fetched_bytes - total);
  }
}

TEST(EmulatorSectorTest, ReReadsBeyondTheWindowAreDramTraffic) {
  // Block b reads the b mod 8-th block-sized region of x (512 bytes, 4 sectors per warp):
  // the second 8 blocks read again what the first 8 read. Between two touches of one of
  // the region's sectors lie 255 other sectors (8160 bytes): the other 3 of its warp
  // access, the rest of its block's accesses and the loads and stores of the next 7 blocks
  // after it, the earlier warps' accesses of the block that reads it again before.
  constexpr uint32_t kCycle = 8;
  const std::string index = "  %r = urem i32 %ctaid, " + std::to_string(kCycle) +
                            "\n  %rb = mul i32 %r, %ntid\n  %src = add i32 %rb, %tid";
  const CompiledKernel k = Gather("float", index, "src", kBlocks, kThreads);
  const uint64_t region = kThreads * 4;
  const uint64_t between = 255 * 32;
  Buffer x(kCycle * region), y(kElements * 4);
  for (const uint64_t window : {between - 32, between}) {
    SCOPED_TRACE(window);
    const std::optional<LaunchStats> stats = LaunchInWindow(k, window, x.data(), y.data());
    ASSERT_TRUE(stats.has_value());
    const SectorTraffic& loads = stats->sector_loads;
    EXPECT_EQ(loads.used_bytes, kElements * 4);
    EXPECT_EQ(loads.fetched_bytes, kElements * 4);
    EXPECT_EQ(loads.distinct_bytes, kCycle * region);
    const uint64_t rereads = window < between ? kCycle * region : 0;
    EXPECT_EQ(loads.reread_bytes, rereads);
    EXPECT_EQ(loads.dram_bytes, kCycle * region + rereads);
    EXPECT_EQ(stats->sector_stores.dram_bytes, kElements * 4);
    EXPECT_EQ(stats->sector_stores.reread_bytes, 0u);
  }
}

TEST(EmulatorSectorTest, ReReadsAreCountedAcrossTheCountersCompaction) {
  // x (32,768 sectors of f32) read twice in a row: between two touches of a sector lie the
  // rest of x and the stores of a pass, 65,535 sectors, about 2 MiB. The 131,072 touches
  // overflow the counter's table of recent touches, which it compacts to the window's sectors
  // while the kernel's threads run: a re-read within the window stays an L2 hit across that,
  // one beyond it goes to DRAM.
  constexpr uint64_t kSectors = 32768;
  constexpr uint64_t kElementsOfX = kSectors * 8;
  constexpr uint32_t kBlockThreads = 256;
  const uint32_t blocks = static_cast<uint32_t>(2 * kElementsOfX / kBlockThreads);
  const CompiledKernel k = Gather("float", "  %src = urem i32 %i, " + std::to_string(kElementsOfX),
                                  "src", blocks, kBlockThreads);
  Buffer x(kElementsOfX * 4), y(2 * kElementsOfX * 4);
  const uint64_t between = (2 * kSectors - 1) * 32;
  for (const uint64_t window : {between / 2, 2 * between}) {
    SCOPED_TRACE(window);
    const std::optional<LaunchStats> stats = LaunchInWindow(k, window, x.data(), y.data());
    ASSERT_TRUE(stats.has_value());
    const SectorTraffic& loads = stats->sector_loads;
    EXPECT_EQ(loads.distinct_bytes, kElementsOfX * 4);
    const uint64_t rereads = window < between ? kElementsOfX * 4 : 0;
    EXPECT_EQ(loads.reread_bytes, rereads);
    EXPECT_EQ(loads.dram_bytes, kElementsOfX * 4 + rereads);
  }
}

TEST(EmulatorSectorTest, StoresAreWrittenBackOnceUnlessEvicted) {
  // Every block stores to the same region of y (y[tid] = x[i]): within the window the
  // region is written back once, beyond it once per block.
  const CompiledKernel k = [] {
    CompiledKernel g = Gather("float", "", "i", kBlocks, kThreads);
    std::string ir = Replace(Replace(kGather, "ELEM", "float"), "INDEX", "");
    ir = Replace(ir, "%SOURCE", "%i");
    ir = Replace(ir, "%i64 = zext i32 %i to i64", "%i64 = zext i32 %tid to i64");
    g.portable_ir = KernelBitcode(ir);
    return g;
  }();
  Buffer x(kElements * 4), y(kThreads * 4);
  const uint64_t region = kThreads * 4;
  for (const uint64_t window : {uint64_t{1} << 20, uint64_t{256}}) {
    SCOPED_TRACE(window);
    const std::optional<LaunchStats> stats = LaunchInWindow(k, window, x.data(), y.data());
    ASSERT_TRUE(stats.has_value());
    const SectorTraffic& stores = stats->sector_stores;
    EXPECT_EQ(stores.distinct_bytes, region);
    EXPECT_EQ(stores.dram_bytes, window > kElements * 8 ? region : kBlocks * region);
  }
}

// Each thread loads x[4i .. 4i+3] as four scalar loads and stores their sum to y[i]. With
// the first load 16-byte aligned NVPTX's load-store vectorizer makes one 16-byte load of
// them, and the emulator counts one warp access; aligned to 4 bytes only, they stay four
// scalar loads, each spanning 4 times the sectors it uses.
// Thread-local: %s = x[J] + x[J + 1] + x[J + 2] + x[J + 3] for the i32 value %J, the first
// load aligned to ALIGN bytes.
const char* const kFourLoadsAt = R"(
  %j1 = add nuw nsw i32 %J, 1
  %j2 = add nuw nsw i32 %J, 2
  %j3 = add nuw nsw i32 %J, 3
  %e0 = zext i32 %J to i64
  %e1 = zext i32 %j1 to i64
  %e2 = zext i32 %j2 to i64
  %e3 = zext i32 %j3 to i64
  %p0 = getelementptr inbounds float, ptr %x, i64 %e0
  %p1 = getelementptr inbounds float, ptr %x, i64 %e1
  %p2 = getelementptr inbounds float, ptr %x, i64 %e2
  %p3 = getelementptr inbounds float, ptr %x, i64 %e3
  %v0 = load float, ptr %p0, align ALIGN
  %v1 = load float, ptr %p1, align 4
  %v2 = load float, ptr %p2, align 8
  %v3 = load float, ptr %p3, align 4
  %s0 = fadd float %v0, %v1
  %s1 = fadd float %v2, %v3
  %s = fadd float %s0, %s1
)";

const char* const kFourLoads = R"(
define void @four(ptr %x, ptr %y) {
entry:
GLOBAL_THREAD
  %j = shl i32 %i, 2
FOUR_LOADS
  %i64 = zext i32 %i to i64
  %py = getelementptr inbounds float, ptr %y, i64 %i64
  store float %s, ptr %py, align 4
  ret void
}
)";

// A kernel of kBlocks blocks of kThreads threads from the IR text of function `name`.
CompiledKernel TextKernel(const std::string& name, const std::string& ir) {
  CompiledKernel k;
  k.name = name;
  k.launch.grid = {kBlocks, 1, 1};
  k.launch.block = {kThreads, 1, 1};
  k.portable_ir = KernelBitcode(ir);
  return k;
}

TEST(EmulatorSectorTest, AccessesTheVectorizerMergesAreOneWarpAccess) {
  for (const int align : {16, 4}) {
    SCOPED_TRACE(align);
    auto emu = SectorEmulator(uint64_t{1} << 20);
    ASSERT_NE(emu, nullptr);
    const std::string four =
        Replace(Replace(kFourLoadsAt, "%J", "%j"), "ALIGN", std::to_string(align));
    const CompiledKernel k = TextKernel("four", Replace(kFourLoads, "FOUR_LOADS", four));
    Buffer x(kElements * 16), y(kElements * 4);
    auto stats = emu->Launch(k, {x.data(), y.data()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    Print(("align " + std::to_string(align)).c_str(), *stats);
    const SectorTraffic& loads = stats->sector_loads;
    EXPECT_EQ(loads.used_bytes, kElements * 16);
    // Aligned to 4 bytes, the loads at +8 (aligned to 8) still pair with the one at +12.
    // Each of the three accesses then spans the warp's 512 bytes (16 sectors), a third of
    // what they fetch being used.
    EXPECT_EQ(loads.warp_accesses, (align == 16 ? 1 : 3) * kElements / 32);
    EXPECT_EQ(loads.fetched_bytes, (align == 16 ? 1 : 3) * kElements * 16);
    EXPECT_EQ(loads.dram_bytes, kElements * 16);
  }
}

// A column lane's loop (the column reduction's form): thread i sums x[r][4i .. 4i + 3] over
// rows r, its four loads at `row + first` plus 0..3. The host's optimisation rewrites that
// arithmetic (it hoists the invariant `first + j` out of the loop, or widens and masks the
// index) where NVPTX's vectorizer still makes one 16-byte load of the four; the emulator
// pairs them on the code as emitted, so each row is one warp access that fetches what it uses.
const char* const kColumnLane = R"(
define void @lane(ptr %x, ptr %y) {
entry:
GLOBAL_THREAD
  %first = shl nuw nsw i32 %i, 2
  br label %header
header:
  %r = phi i32 [ 0, %entry ], [ %r.next, %body ]
  %acc = phi float [ 0.0, %entry ], [ %acc.next, %body ]
  %done = icmp sge i32 %r, ROWS
  br i1 %done, label %exit, label %body
body:
  %row = mul nuw nsw i32 %r, COLUMNS
  %k0 = add nuw nsw i32 %row, %first
FOUR_LOADS
  %acc.next = fadd float %acc, %s
  %r.next = add nuw nsw i32 %r, 1
  br label %header
exit:
  %i64 = zext i32 %i to i64
  %py = getelementptr inbounds float, ptr %y, i64 %i64
  store float %acc, ptr %py, align 4
  ret void
}
)";

TEST(EmulatorSectorTest, LoadsPairedAsEmittedStayPairedAfterTheHostsOptimisation) {
  constexpr uint64_t kRows = 8;
  const uint64_t columns = kElements * 4;
  auto emu = SectorEmulator(uint64_t{1} << 20);
  ASSERT_NE(emu, nullptr);
  std::string ir = Replace(kColumnLane, "ROWS", std::to_string(kRows));
  ir = Replace(ir, "COLUMNS", std::to_string(columns));
  ir = Replace(ir, "FOUR_LOADS", Replace(Replace(kFourLoadsAt, "%J", "%k0"), "ALIGN", "16"));
  const CompiledKernel k = TextKernel("lane", ir);
  Buffer x(kRows * columns * 4), y(kElements * 4);
  auto stats = emu->Launch(k, {x.data(), y.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  Print("column lane", *stats);
  const SectorTraffic& loads = stats->sector_loads;
  EXPECT_EQ(loads.used_bytes, kRows * kElements * 16);
  EXPECT_EQ(loads.warp_accesses, kRows * kElements / 32);
  EXPECT_EQ(loads.fetched_bytes, kRows * kElements * 16);
}

TEST(EmulatorSectorTest, OffByDefault) {
  auto emu = Emulator::Create();
  ASSERT_TRUE(emu.ok()) << emu.status().ToString();
  Buffer x(kElements * 4), y(kElements * 4);
  auto stats = (*emu)->Launch(Gather("float", "", "i", kBlocks, kThreads), {x.data(), y.data()});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->global_bytes_loaded, kElements * 4);
  EXPECT_EQ(stats->sector_loads.warp_accesses, 0u);
  EXPECT_EQ(stats->sector_loads.fetched_bytes, 0u);
  EXPECT_EQ(stats->sector_stores.dram_bytes, 0u);
}

}  // namespace
}  // namespace stitch
