// The device table, the occupancy rules and the analytical cost model. Expectations are
// worked out by hand from the CUDA occupancy rules and the model's formulas (cost_model.cc);
// the property tests draw random mappings from a seed that every failure reports.
#include "stitch/plan/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/gpu_device.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

constexpr double kLaunch = 2.5e-6;
constexpr double kLatency = 700e-9;
constexpr double kH100Bandwidth = 3.35e12;
constexpr int64_t kGiB = int64_t{1} << 30;

const GpuDevice& H100() { return *FindDevice("H100"); }
const GpuDevice& A100() { return *FindDevice("A100"); }
const GpuDevice& H200() { return *FindDevice("H200"); }

ThreadMapping Occupancy(uint32_t threads, int registers, uint32_t shared) {
  ThreadMapping m;
  m.launch.block = {threads, 1, 1};
  m.registers_per_thread = registers;
  m.shared_bytes = shared;
  return m;
}

// A grid-stride copy: each thread moves `vector_width` f32 per pass and keeps
// `in_flight` bytes of loads outstanding; `bytes` are loaded and as many stored.
KernelSpec Copy(uint32_t blocks, int64_t bytes, int vector_width, int in_flight,
                uint32_t threads = 256) {
  KernelSpec k;
  k.name = "copy";
  k.kind = KernelKind::kLoop;
  ThreadMapping& m = k.mapping;
  m.launch.grid = {blocks, 1, 1};
  m.launch.block = {threads, 1, 1};
  m.vector_width = vector_width;
  m.load_bytes_in_flight_per_thread = in_flight;
  m.work_items = bytes / 4;
  m.bytes_loaded = bytes;
  m.bytes_stored = bytes;
  return k;
}

// The model with the device table's own figures: these tests check the terms' arithmetic
// against those figures; the fitted version's constants are checked by the calibration test.
std::unique_ptr<CostModel> DatasheetModel(const GpuDevice& d) {
  return NewAnalyticalCostModel(d, CostModelVersion::kDatasheet);
}

double Seconds(const GpuDevice& d, const KernelSpec& k) {
  return DatasheetModel(d)->EstimateKernel(Graph(), k).seconds;
}

// --- The device table -----------------------------------------------------------------

TEST(GpuDevice, FindsByName) {
  ASSERT_NE(FindDevice("H100"), nullptr);
  EXPECT_EQ(FindDevice("H100")->sms, 132);
  EXPECT_DOUBLE_EQ(FindDevice("H100")->hbm_bytes_per_second, 3.35e12);
  ASSERT_NE(FindDevice("H200"), nullptr);
  EXPECT_DOUBLE_EQ(FindDevice("H200")->hbm_bytes_per_second, 4.8e12);
  ASSERT_NE(FindDevice("A100"), nullptr);
  EXPECT_EQ(FindDevice("A100")->sms, 108);
  EXPECT_DOUBLE_EQ(FindDevice("A100")->hbm_bytes_per_second, 2.039e12);
  ASSERT_NE(FindDevice("T4"), nullptr);
  EXPECT_EQ(FindDevice("T4")->max_threads_per_sm, 1024);
  ASSERT_NE(FindDevice("L4"), nullptr);
  EXPECT_EQ(FindDevice("L4")->max_threads_per_sm, 1536);
  EXPECT_EQ(KnownDevices().size(), 6u);
}

TEST(GpuDevice, UnknownIsNull) {
  EXPECT_EQ(FindDevice("V100"), nullptr);
  EXPECT_EQ(FindDevice("sm_90"), nullptr);  // targets are Target's (target_test.cc)
  EXPECT_EQ(FindDevice("h100"), nullptr);
  EXPECT_EQ(FindDevice(""), nullptr);
}

// --- Occupancy ------------------------------------------------------------------------
// H100 and A100 both have 2048 threads (64 warps), 32 block slots and 65536 registers in
// four sub-partitions per SM; H100 has 228 KiB of shared memory per SM, A100 164 KiB.

TEST(Occupancy, LimitedByThreads) {
  // 768 threads = 24 warps: 64 / 24 = 2 blocks. 16 registers: 512 per warp, 32 warps per
  // sub-partition, 128 in all, 5 blocks. Shared: 1 KiB reserved each, 228 blocks.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(768, 16, 0)), 2);
  // 1024 threads: 2 blocks.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(1024, 32, 0)), 2);
  // 48 threads take two warps: 32 blocks by threads, and 32 block slots.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(48, 16, 0)), 32);
  // 96 threads (3 warps): 64 / 3 = 21.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(96, 16, 0)), 21);
}

TEST(Occupancy, LimitedByRegisters) {
  // 256 threads (8 warps), 64 registers: 2048 per warp, 16384 / 2048 = 8 warps per
  // sub-partition, 32 warps, 4 blocks (threads alone would allow 8).
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(256, 64, 0)), 4);
  // 128 registers: 4096 per warp, 4 warps per sub-partition, 16 warps, 2 blocks.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(256, 128, 0)), 2);
  // 40 registers: 1280 per warp. Per sub-partition 16384 / 1280 = 12 warps, 48 in all;
  // 64-thread blocks (2 warps): 24. (The whole file, 65536 / 2560, would say 25.)
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(64, 40, 0)), 24);
  // 255 registers: 8160 rounds up to 8192 per warp, 2 warps per sub-partition, 8 in all.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(32, 255, 0)), 8);
}

TEST(Occupancy, RegisterLaunchLimits) {
  // 1024 threads x 64 registers: exactly 65536 per block, one block.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(1024, 64, 0)), 1);
  // 72 registers: 2304 per warp x 32 warps = 73728 > 65536, the launch fails.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(1024, 72, 0)), 0);
  // More than 255 registers per thread cannot be allocated.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(32, 256, 0)), 0);
}

TEST(Occupancy, LimitedBySharedMemory) {
  // 48 KiB + 1 KiB reserved = 50176 bytes per block: H100 233472 / 50176 = 4, A100
  // 167936 / 50176 = 3 (threads and registers allow 16 each for 128 threads).
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(128, 32, 48 * 1024)), 4);
  EXPECT_EQ(ResidentBlocksPerSm(A100(), Occupancy(128, 32, 48 * 1024)), 3);
  // 10000 + 1024 = 11024 rounds up to 11136 (128-byte units): 233472 / 11136 = 20.
  // (Without the rounding it would be 21.)
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(64, 32, 10000)), 20);
  // Static shared memory beyond 48 KiB per block does not launch.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(128, 32, 48 * 1024 + 1)), 0);
}

TEST(Occupancy, LimitedByBlockSlots) {
  // One warp, 32 registers: 64 by threads, 64 by registers, 228 by shared memory; 32 slots.
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(32, 32, 0)), 32);
  EXPECT_EQ(ResidentBlocksPerSm(A100(), Occupancy(32, 32, 0)), 32);
}

TEST(Occupancy, BadBlockShapes) {
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(0, 32, 0)), 0);
  EXPECT_EQ(ResidentBlocksPerSm(H100(), Occupancy(1025, 32, 0)), 0);
  ThreadMapping m = Occupancy(32, 32, 0);
  m.launch.block = {32, 33, 1};  // 1056 threads
  EXPECT_EQ(ResidentBlocksPerSm(H100(), m), 0);
  m.launch.block = {32, 8, 1};  // 256 threads, as 8 rows of a warp
  EXPECT_EQ(ResidentBlocksPerSm(H100(), m), 8);
}

TEST(Occupancy, CoResidentBlocks) {
  EXPECT_EQ(CoResidentBlocks(H100(), Occupancy(256, 32, 0)), 8 * 132);
  EXPECT_EQ(CoResidentBlocks(A100(), Occupancy(256, 32, 0)), 8 * 108);
  EXPECT_EQ(CoResidentBlocks(H100(), Occupancy(256, 64, 0)), 4 * 132);
  EXPECT_EQ(CoResidentBlocks(H100(), Occupancy(128, 32, 64 * 1024)), 0);
}

// --- The model's terms ----------------------------------------------------------------

TEST(CostModel, VectorCopyReachesPeak) {
  // 1 GiB of f32 read and written by 1056 blocks (8 per SM on 132 SMs) of 256 threads with
  // 16-byte loads: 132 x 2048 x 16 bytes = 4.3 MB in flight covers 3.35 TB/s x 700 ns =
  // 2.3 MB, so the copy runs at peak. 2^28 elements in passes of 1024: 262144 passes,
  // ceil(262144 / 1056) = 249 on the busiest block against 248.2 on average (0.3%).
  KernelSpec k = Copy(1056, kGiB, 4, 16);
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  const double ideal = 2.0 * kGiB / kH100Bandwidth;
  EXPECT_EQ(c.global_bytes, 2 * kGiB);
  EXPECT_EQ(c.resident_blocks_per_sm, 8);
  EXPECT_DOUBLE_EQ(c.waves, 1.0);
  EXPECT_DOUBLE_EQ(c.launch_seconds, kLaunch);
  EXPECT_DOUBLE_EQ(c.barrier_seconds, 0.0);
  EXPECT_GE(c.memory_seconds, ideal);
  EXPECT_NEAR(c.memory_seconds, ideal * 249.0 * 1056.0 / 262144.0, ideal * 1e-9);
  EXPECT_NEAR(c.seconds, ideal + kLaunch, 0.01 * (ideal + kLaunch));
  EXPECT_GT(c.bandwidth_fraction, 0.99);
  EXPECT_LE(c.bandwidth_fraction, 1.0);
  EXPECT_DOUBLE_EQ(c.seconds, c.memory_seconds + c.launch_seconds + c.barrier_seconds);
}

TEST(CostModel, ScalarLoadsOnFewBlocksAreLatencyBound) {
  // 132 blocks x 256 threads x 4 bytes = 135168 bytes in flight: by Little's law
  // 135168 / 700 ns = 193 GB/s, so 2 GiB take 2^31 x 700 ns / 135168 = 11.1 ms. Passes of
  // 256 elements: 1048576 of them, at most 7944 per block against 7943.8 on average.
  KernelSpec k = Copy(132, kGiB, 1, 4);
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  const double expected = 2.0 * kGiB * kLatency / 135168.0 * (7944.0 * 132.0 / 1048576.0);
  EXPECT_NEAR(c.memory_seconds, expected, expected * 1e-9);
  EXPECT_NEAR(c.bandwidth_fraction, 135168.0 / kLatency / kH100Bandwidth, 1e-3);
  EXPECT_GT(c.seconds, 10 * Seconds(H100(), Copy(1056, kGiB, 4, 16)));
}

TEST(CostModel, SmallGridIsSlower) {
  // 24 blocks: 24 x 256 x 16 = 98304 bytes in flight, 140 GB/s. 528 blocks: 2.16 MB in
  // flight, 3.09 TB/s.
  const int64_t bytes = 256LL << 20;
  KernelCost few = DatasheetModel(H100())->EstimateKernel(Graph(), Copy(24, bytes, 4, 16));
  KernelCost many = DatasheetModel(H100())->EstimateKernel(Graph(), Copy(528, bytes, 4, 16));
  EXPECT_GT(few.seconds, many.seconds);
  EXPECT_NEAR(few.bandwidth_fraction, 98304.0 / kLatency / kH100Bandwidth, 1e-3);
  EXPECT_NEAR(many.bandwidth_fraction, 528.0 * 256 * 16 / kLatency / kH100Bandwidth, 1e-2);
  // 2^29 bytes over 140 GB/s against 2^29 x 1.007 (125 passes for 124.1 on average) over
  // 3.09 TB/s: about 22 times slower.
  EXPECT_GT(few.seconds, 20 * many.seconds);
}

TEST(CostModel, BusySmsBoundBandwidth) {
  // 24 blocks of 1024 threads with 64 bytes in flight each: 1.57 MB in flight would allow
  // 2.2 TB/s, but 24 of 132 SMs draw at most 24/132 of peak.
  const int64_t bytes = 256LL << 20;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), Copy(24, bytes, 4, 64, 1024));
  EXPECT_NEAR(c.bandwidth_fraction, 24.0 / 132.0, 1e-3);
}

TEST(CostModel, PartialWaveStretchesMemoryTime) {
  // 1584 blocks, one pass each, 1056 slots: 1.5 waves. The second wave runs half full, so
  // memory takes ceil(1.5) / 1.5 = 4/3 of the time at peak.
  const int64_t bytes = int64_t{1584} * 256 * 4 * 4;  // one 4-wide vector per thread
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), Copy(1584, bytes, 4, 16));
  EXPECT_DOUBLE_EQ(c.waves, 1.5);
  EXPECT_DOUBLE_EQ(c.imbalance, 4.0 / 3.0);
  const double ideal = 2.0 * static_cast<double>(bytes) / kH100Bandwidth;
  EXPECT_NEAR(c.memory_seconds, ideal * 4.0 / 3.0, ideal * 1e-9);
}

// fit-4: the same half-full second wave. In flight: 1056 slots x 256 threads x 32 bytes =
// 8.7 MB, 12.4 TB/s at the datasheet latency, so half the slots still draw the whole cap and
// the last wave takes only its bytes' time. With 2 bytes a thread in flight (0.77 TB/s,
// latency-bound) the half-full wave takes as long as a full one, as before.
TEST(CostModel, APartialWaveDrawsWhatItsLoadsInFlightAllow) {
  const int64_t bytes = int64_t{1584} * 256 * 4 * 4;
  CostModelParameters p = CostModelParametersFor(H100(), CostModelVersion::kDatasheet);
  p.partial_rounds_share_bandwidth = true;
  const std::unique_ptr<CostModel> model = NewAnalyticalCostModel(H100(), p);
  const KernelCost wide = model->EstimateKernel(Graph(), Copy(1584, bytes, 4, 32));
  const double ideal = 2.0 * static_cast<double>(bytes) / kH100Bandwidth;
  EXPECT_NEAR(wide.memory_seconds, ideal, ideal * 1e-9);
  const KernelCost narrow = model->EstimateKernel(Graph(), Copy(1584, bytes, 4, 2));
  const double latency_bound =
      2.0 * static_cast<double>(bytes) * 4.0 / 3.0 / (1056.0 * 256 * 2 / kLatency);
  EXPECT_NEAR(narrow.memory_seconds, latency_bound, latency_bound * 1e-9);
  EXPECT_DOUBLE_EQ(
      narrow.memory_seconds,
      DatasheetModel(H100())->EstimateKernel(Graph(), Copy(1584, bytes, 4, 2)).memory_seconds);
}

// fit-4: an SM starts its blocks one after another. 401,408 blocks of 128 threads, one
// 4-byte element a thread (16 bytes of loads in flight, as from four inputs), make 3,041
// blocks an SM: at 90 ns a start, 274 us, where their 411 MB take 136 us at the fitted
// bandwidth. Half the blocks, two elements a thread, move the same bytes in half the starts
// (suite row #18's loop, which the H200 ran in 247 us at 401,408 blocks where the XLA
// model's 200,704 took 185).
TEST(CostModel, ManyShortBlocksTakeTheirStartsOnEachSm) {
  const int64_t elements = int64_t{401408} * 128;
  const int64_t bytes = elements * 4;
  const CostModelParameters p = CostModelParametersFor(H100(), CostModelVersion::kFit4);
  ASSERT_GT(p.block_dispatch_seconds, 0);
  const std::unique_ptr<CostModel> model = NewAnalyticalCostModel(H100(), p);
  const KernelCost many = model->EstimateKernel(Graph(), Copy(401408, bytes, 1, 16, 128));
  const double starts = std::ceil(401408.0 / 132) * p.block_dispatch_seconds;
  EXPECT_DOUBLE_EQ(many.memory_seconds, starts);
  const KernelCost half = model->EstimateKernel(Graph(), Copy(200704, bytes, 2, 16, 128));
  EXPECT_LT(half.memory_seconds, 0.6 * many.memory_seconds);
  // fit-3 has no such term: it priced the two within 1%.
  const std::unique_ptr<CostModel> fit3 = NewAnalyticalCostModel(H100(), CostModelVersion::kFit3);
  EXPECT_NEAR(fit3->EstimateKernel(Graph(), Copy(401408, bytes, 1, 16, 128)).seconds,
              fit3->EstimateKernel(Graph(), Copy(200704, bytes, 2, 16, 128)).seconds,
              0.01 * fit3->EstimateKernel(Graph(), Copy(200704, bytes, 2, 16, 128)).seconds);
}

// fit-5: past the first wave an SM takes a new block whenever a slot frees, so a grid ends
// with its busiest SM's blocks. The latency-bound half-full second wave above (1,584 blocks, 2
// bytes a thread in flight), which fit-4 still stretches by 4/3, is 12 blocks on each of the
// 132 SMs: no SM runs more than the mean. 1,600 blocks put 13 on the busiest SM against a mean
// of 12.1. A grid within one wave is priced alike with or without the term.
TEST(CostModel, DealtBlocksEndWithTheBusiestSmsShare) {
  const int64_t bytes = int64_t{1584} * 256 * 4 * 4;
  CostModelParameters p = CostModelParametersFor(H100(), CostModelVersion::kDatasheet);
  p.partial_rounds_share_bandwidth = true;
  const std::unique_ptr<CostModel> lockstep = NewAnalyticalCostModel(H100(), p);
  p.dealt_blocks = true;
  const std::unique_ptr<CostModel> dealt = NewAnalyticalCostModel(H100(), p);
  const double latency_bound = 2.0 * static_cast<double>(bytes) / (1056.0 * 256 * 2 / kLatency);
  const KernelCost even = dealt->EstimateKernel(Graph(), Copy(1584, bytes, 4, 2));
  EXPECT_DOUBLE_EQ(even.imbalance, 1.0);
  EXPECT_NEAR(even.memory_seconds, latency_bound, latency_bound * 1e-9);
  EXPECT_NEAR(lockstep->EstimateKernel(Graph(), Copy(1584, bytes, 4, 2)).memory_seconds,
              latency_bound * 4.0 / 3.0, latency_bound * 1e-9);
  const int64_t more = int64_t{1600} * 256 * 4 * 4;
  EXPECT_DOUBLE_EQ(dealt->EstimateKernel(Graph(), Copy(1600, more, 4, 2)).imbalance,
                   13.0 * 132.0 / 1600.0);
  const int64_t one_wave = int64_t{1000} * 256 * 4 * 4;
  EXPECT_EQ(dealt->EstimateKernel(Graph(), Copy(1000, one_wave, 4, 2)).seconds,
            lockstep->EstimateKernel(Graph(), Copy(1000, one_wave, 4, 2)).seconds);
}

// A kernel whose loads are all of small inputs served from cache (none in flight) and whose
// bytes are its posted stores takes its bytes' time, where a byte a thread in flight would
// have bound all of its bytes at Little's law: 1,056 slots of 256 threads a byte each, 0.39
// TB/s at the datasheet latency.
TEST(CostModel, StoresBehindCachedLoadsAreNotBoundByLoadsInFlight) {
  KernelSpec k = Copy(1056, kGiB, 4, 0);
  k.mapping.bytes_loaded = 4096;
  const std::unique_ptr<CostModel> model = DatasheetModel(H100());
  const KernelCost cached = model->EstimateKernel(Graph(), k);
  const double stores =
      static_cast<double>(k.mapping.bytes_loaded + kGiB) * cached.imbalance / kH100Bandwidth;
  EXPECT_NEAR(cached.memory_seconds, stores, stores * 1e-9);
  k.mapping.load_bytes_in_flight_per_thread = 1;
  EXPECT_GT(model->EstimateKernel(Graph(), k).memory_seconds, 5 * stores);
}

TEST(CostModel, CappedLoopingGridIsBalancedByItsWork) {
  // 1056 blocks over 1056 x 100 + 528 passes: the busiest block makes 101 passes against
  // 100.5 on average, 0.5% over peak time, not the 4/3 of a half-empty last wave.
  const int64_t passes = int64_t{1056} * 100 + 528;
  const int64_t bytes = passes * 256 * 4 * 4;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), Copy(1056, bytes, 4, 16));
  const double ideal = 2.0 * static_cast<double>(bytes) / kH100Bandwidth;
  EXPECT_NEAR(c.memory_seconds, ideal * 101.0 / 100.5, ideal * 1e-9);
  EXPECT_NEAR(c.imbalance, 101.0 / 100.5, 1e-12);
}

TEST(CostModel, IdleBlocksCostNothing) {
  // 4096 elements in passes of 1024 need 4 blocks; a grid of 1056 leaves 1052 idle, and the
  // kernel is priced as the 4 busy ones.
  KernelSpec big_grid = Copy(1056, 16384, 4, 16);
  KernelSpec exact_grid = Copy(4, 16384, 4, 16);
  EXPECT_DOUBLE_EQ(Seconds(H100(), big_grid), Seconds(H100(), exact_grid));
}

TEST(CostModel, GridBarrierAddsItsLatency) {
  KernelSpec k = Copy(1056, 64LL << 20, 4, 16);
  KernelSpec with_barrier = k;
  with_barrier.mapping.grid_barriers = 1;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), with_barrier);
  const double barrier = H100().grid_barrier_seconds;
  ASSERT_GT(barrier, 0);
  EXPECT_DOUBLE_EQ(c.barrier_seconds, barrier);
  EXPECT_NEAR(c.seconds - Seconds(H100(), k), barrier, 1e-12);
  with_barrier.mapping.grid_barriers = 3;
  EXPECT_NEAR(Seconds(H100(), with_barrier) - Seconds(H100(), k), 3 * barrier, 1e-12);
}

TEST(CostModel, GridBarrierBeyondCoResidencyIsRejected) {
  // 1057 blocks cannot all be resident at 8 per SM on 132 SMs: a grid barrier deadlocks.
  KernelSpec k = Copy(1057, 64LL << 20, 4, 16);
  EXPECT_TRUE(std::isfinite(Seconds(H100(), k)));
  k.mapping.grid_barriers = 1;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  EXPECT_TRUE(std::isinf(c.seconds));
  EXPECT_EQ(c.resident_blocks_per_sm, 0);
}

TEST(CostModel, BlockBarriersCountPassesOfTheBusiestBlock) {
  // A block per row: 10^6 rows over 1056 blocks of 256 threads, two barriers per row. The
  // busiest block takes ceil(10^6 / 1056) = 947 rows: 2 x 947 x 40 ns.
  KernelSpec k;
  k.kind = KernelKind::kRowReduce;
  k.mapping.launch.grid = {1056, 1, 1};
  k.mapping.launch.block = {256, 1, 1};
  k.mapping.threads_per_row = 256;
  k.mapping.rows_per_block = 1;
  k.mapping.block_barriers_per_item = 2;
  k.mapping.work_items = 1000000;
  k.mapping.load_bytes_in_flight_per_thread = 16;
  k.mapping.bytes_loaded = int64_t{1000000} * 1024 * 4;
  k.mapping.bytes_stored = int64_t{1000000} * 4;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  EXPECT_NEAR(c.barrier_seconds, 2.0 * 947 * 40e-9, 1e-15);
  // Eight rows side by side per block share their barriers: ceil(125000 / 1056) = 119
  // passes.
  k.mapping.rows_per_block = 8;
  k.mapping.threads_per_row = 32;
  c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  EXPECT_NEAR(c.barrier_seconds, 2.0 * 119 * 40e-9, 1e-15);
}

TEST(CostModel, SharedMemoryBeyondTheDeviceIsRejected) {
  KernelSpec k = Copy(1056, 64LL << 20, 4, 16);
  k.mapping.shared_bytes = 64 * 1024;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  EXPECT_EQ(c.resident_blocks_per_sm, 0);
  EXPECT_TRUE(std::isinf(c.seconds));
  FusionPlan plan;
  plan.kernels = {Copy(1056, 64LL << 20, 4, 16), k};
  EXPECT_TRUE(std::isinf(DatasheetModel(H100())->Estimate(Graph(), plan).seconds));
  plan.kernels.pop_back();
  EXPECT_TRUE(std::isfinite(DatasheetModel(H100())->Estimate(Graph(), plan).seconds));
}

TEST(CostModel, LoadsWaitAtLeastOneRoundTrip) {
  KernelSpec k = Copy(1, 1024, 4, 16);
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  EXPECT_DOUBLE_EQ(c.memory_seconds, kLatency);
}

TEST(CostModel, StoresAloneAreNotLatencyBound) {
  // An iota-like kernel: no loads, 1 GiB stored by a full grid at peak; one pass per block.
  KernelSpec k = Copy(1056, kGiB, 4, 0);
  k.mapping.bytes_loaded = 0;
  k.mapping.work_items = 1056 * 1024;
  KernelCost c = DatasheetModel(H100())->EstimateKernel(Graph(), k);
  EXPECT_NEAR(c.memory_seconds, kGiB / kH100Bandwidth, 1e-12);
}

TEST(CostModel, FasterDevicesAreFaster) {
  KernelSpec k = Copy(1056, kGiB, 4, 16);
  EXPECT_LT(Seconds(H200(), k), Seconds(H100(), k));
  KernelSpec a = Copy(864, kGiB, 4, 16);  // a full grid on 108 SMs
  EXPECT_GT(Seconds(A100(), a), Seconds(H100(), k));
  const double a100_bandwidth = A100().hbm_bytes_per_second;
  EXPECT_NEAR(Seconds(A100(), a), 2.0 * kGiB / a100_bandwidth + kLaunch,
              0.01 * 2.0 * kGiB / a100_bandwidth);
}

TEST(CostModel, UnscheduledKernelsArePricedByTheirBuffers) {
  // A plan straight from a planner (no mappings yet): each input read once and each output
  // written once, at peak, plus a launch.
  Graph g;
  int x = testing::Param(g, {DType::kF32, {1024}}, 0);
  int y = testing::Unary(g, OpCode::kTanh, x);
  g.outputs = {y};
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 1u);
  PlanCost c = DatasheetModel(H100())->Estimate(g, *plan);
  EXPECT_EQ(c.global_bytes, 8192);
  EXPECT_EQ(c.kernels, 1);
  EXPECT_NEAR(c.seconds, 8192 / kH100Bandwidth + kLaunch, 1e-15);
}

TEST(CostModel, PlanSumsItsKernels) {
  FusionPlan plan;
  plan.kernels = {Copy(1056, kGiB, 4, 16), Copy(24, 1 << 20, 1, 4), Copy(132, 4096, 2, 8)};
  PlanCost c = DatasheetModel(H100())->Estimate(Graph(), plan);
  ASSERT_EQ(c.per_kernel.size(), 3u);
  EXPECT_EQ(c.kernels, 3);
  EXPECT_EQ(c.global_bytes, 2 * kGiB + 2 * (1 << 20) + 2 * 4096);
  double seconds = 0;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    EXPECT_DOUBLE_EQ(c.per_kernel[i].seconds, Seconds(H100(), plan.kernels[i]));
    seconds += c.per_kernel[i].seconds;
  }
  EXPECT_DOUBLE_EQ(c.seconds, seconds);
  EXPECT_EQ(DatasheetModel(H100())->Estimate(Graph(), FusionPlan()).seconds, 0.0);
}

// --- Properties over random mappings --------------------------------------------------

uint64_t PropertySeed() {
  // A new seed every run, logged so a failure can be replayed by fixing it here.
  static const uint64_t seed = [] {
    uint64_t s = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    std::printf("cost model properties: seed %llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

KernelSpec RandomKernel(std::mt19937_64& rng) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  KernelSpec k;
  k.name = "k";
  k.kind = static_cast<KernelKind>(uniform(0, 3));
  ThreadMapping& m = k.mapping;
  const uint32_t warps = static_cast<uint32_t>(uniform(1, 32));
  m.launch.block = uniform(0, 1) ? std::array<uint32_t, 3>{32 * warps, 1, 1}
                                 : std::array<uint32_t, 3>{32, warps, 1};
  m.launch.grid = {static_cast<uint32_t>(uniform(1, 6000)), 1, 1};
  m.threads_per_row = static_cast<int>(uint64_t{1} << uniform(0, 10));
  m.rows_per_block = static_cast<int>(uniform(1, 32));
  m.vector_width = static_cast<int>(uint64_t{1} << uniform(0, 3));
  m.load_bytes_in_flight_per_thread = static_cast<int>(uniform(1, 64));
  m.registers_per_thread = static_cast<int>(uniform(16, 128));
  // Now and then more than a block may declare, or more than fits an SM.
  m.shared_bytes = uniform(0, 3) == 0 ? 0 : static_cast<uint32_t>(uniform(0, 56 * 1024));
  m.block_barriers_per_item = static_cast<int>(uniform(0, 4));
  m.grid_barriers = uniform(0, 3) == 0 ? static_cast<int>(uniform(1, 2)) : 0;
  m.work_items = uniform(1, int64_t{1} << 30);
  m.bytes_loaded = uniform(0, 4) == 0 ? 0 : uniform(1, 8 * kGiB);
  m.bytes_stored = uniform(0, 8 * kGiB);
  return k;
}

std::string Show(const KernelSpec& k) {
  const ThreadMapping& m = k.mapping;
  std::ostringstream out;
  out << KernelKindName(k.kind) << " grid=" << m.launch.grid[0] << " block=" << m.launch.block[0]
      << "x" << m.launch.block[1] << " rows/block=" << m.rows_per_block << " vec=" << m.vector_width
      << " in_flight=" << m.load_bytes_in_flight_per_thread << " regs=" << m.registers_per_thread
      << " smem=" << m.shared_bytes << " block_barriers=" << m.block_barriers_per_item
      << " grid_barriers=" << m.grid_barriers << " items=" << m.work_items
      << " loaded=" << m.bytes_loaded << " stored=" << m.bytes_stored;
  return out.str();
}

TEST(CostModelProperties, RandomMappings) {
  const uint64_t seed = PropertySeed();
  std::mt19937_64 rng(seed);
  for (const GpuDevice& device : KnownDevices()) {
    std::unique_ptr<CostModel> model = DatasheetModel(device);
    for (int i = 0; i < 2000; ++i) {
      KernelSpec k = RandomKernel(rng);
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << ", " << device.name << ", case " << i << ": " << Show(k));
      const Graph g;
      const KernelCost c = model->EstimateKernel(g, k);
      ASSERT_FALSE(std::isnan(c.seconds));
      ASSERT_GT(c.seconds, 0.0);
      const bool feasible = c.resident_blocks_per_sm > 0;
      ASSERT_EQ(feasible, std::isfinite(c.seconds));
      if (feasible) {
        // The terms add up; memory is never faster than peak bandwidth; the achieved
        // fraction of peak is a fraction.
        EXPECT_NEAR(c.seconds, c.memory_seconds + c.launch_seconds + c.barrier_seconds,
                    1e-12 * c.seconds);
        EXPECT_GE(c.memory_seconds * (1 + 1e-12),
                  static_cast<double>(c.global_bytes) / device.hbm_bytes_per_second);
        EXPECT_DOUBLE_EQ(c.launch_seconds, device.launch_seconds);
        EXPECT_GT(c.bandwidth_fraction, 0.0);
        EXPECT_LE(c.bandwidth_fraction, 1.0 + 1e-12);
      }

      // More bytes are never cheaper.
      KernelSpec more = k;
      more.mapping.bytes_loaded += rng() % (kGiB + 1);
      more.mapping.bytes_stored += rng() % (kGiB + 1);
      EXPECT_GE(model->EstimateKernel(g, more).seconds, c.seconds);
      // Nor are more barriers of either kind.
      more = k;
      more.mapping.block_barriers_per_item += 1;
      EXPECT_GE(model->EstimateKernel(g, more).seconds, c.seconds);
      more = k;
      more.mapping.grid_barriers += 1;
      EXPECT_GE(model->EstimateKernel(g, more).seconds, c.seconds);
      // More loads in flight are never slower.
      more = k;
      more.mapping.load_bytes_in_flight_per_thread *= 2;
      EXPECT_LE(model->EstimateKernel(g, more).seconds, c.seconds);
    }
  }
}

TEST(CostModelProperties, HigherBandwidthIsNeverSlower) {
  // H200 is H100 with faster memory: no mapping runs slower on it.
  const uint64_t seed = PropertySeed() + 1;
  std::mt19937_64 rng(seed);
  std::unique_ptr<CostModel> h100 = DatasheetModel(H100());
  std::unique_ptr<CostModel> h200 = DatasheetModel(H200());
  for (int i = 0; i < 2000; ++i) {
    KernelSpec k = RandomKernel(rng);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", case " << i << ": " << Show(k));
    EXPECT_LE(h200->EstimateKernel(Graph(), k).seconds, h100->EstimateKernel(Graph(), k).seconds);
  }
}

// L2 serves the SMs about three times as fast as DRAM: a kernel that reads nothing strided
// reaches DRAM's bound first, on every device and in every version, so the L2 term prices
// only strided reads.
TEST(CostModelProperties, L2BindsOnlyStridedReads) {
  const uint64_t seed = PropertySeed() + 3;
  std::mt19937_64 rng(seed);
  for (const GpuDevice& device : KnownDevices()) {
    for (CostModelVersion version : {CostModelVersion::kDatasheet, CostModelVersion::kFit3,
                                     CostModelVersion::kFit4, CostModelVersion::kFit5}) {
      CostModelParameters with = CostModelParametersFor(device, version);
      CostModelParameters without = with;
      without.l2_bytes_per_second = 0;
      std::unique_ptr<CostModel> priced = NewAnalyticalCostModel(device, with);
      std::unique_ptr<CostModel> unpriced = NewAnalyticalCostModel(device, without);
      for (int i = 0; i < 500; ++i) {
        const KernelSpec k = RandomKernel(rng);
        SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << device.name << ", case "
                                          << i << ": " << Show(k));
        EXPECT_EQ(priced->EstimateKernel(Graph(), k).seconds,
                  unpriced->EstimateKernel(Graph(), k).seconds);
      }
    }
  }
}

TEST(CostModelProperties, PlansSumTheirKernelsAndLaunchesCost) {
  const uint64_t seed = PropertySeed() + 2;
  std::mt19937_64 rng(seed);
  std::unique_ptr<CostModel> model = DatasheetModel(H100());
  for (int i = 0; i < 300; ++i) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", plan " << i);
    FusionPlan plan;
    const int kernels = static_cast<int>(rng() % 6) + 1;
    for (int j = 0; j < kernels; ++j) plan.kernels.push_back(RandomKernel(rng));
    const PlanCost c = model->Estimate(Graph(), plan);
    ASSERT_EQ(c.per_kernel.size(), plan.kernels.size());
    EXPECT_EQ(c.kernels, kernels);
    double seconds = 0;
    int64_t bytes = 0;
    for (const KernelCost& k : c.per_kernel) {
      seconds += k.seconds;
      bytes += k.global_bytes;
    }
    EXPECT_DOUBLE_EQ(c.seconds, seconds);
    EXPECT_EQ(c.global_bytes, bytes);
    // Dropping a kernel (one launch fewer) never costs more; running one twice costs more.
    FusionPlan fewer = plan;
    fewer.kernels.erase(fewer.kernels.begin() + static_cast<int64_t>(rng() % plan.kernels.size()));
    EXPECT_LE(model->Estimate(Graph(), fewer).seconds, c.seconds);
    FusionPlan twice = plan;
    twice.kernels.push_back(plan.kernels.front());
    if (std::isfinite(c.seconds)) {
      EXPECT_GT(model->Estimate(Graph(), twice).seconds, c.seconds);
    } else {
      EXPECT_TRUE(std::isinf(model->Estimate(Graph(), twice).seconds));
    }
  }
}

// --- Model versions and the fitted version's terms --------------------------------------

TEST(CostModelVersions, NamesRoundTripAndUnknownNamesAreRefused) {
  for (CostModelVersion v :
       {CostModelVersion::kDatasheet, CostModelVersion::kH100Fit1, CostModelVersion::kH100Fit2,
        CostModelVersion::kFit3, CostModelVersion::kFit4, CostModelVersion::kFit5}) {
    std::optional<CostModelVersion> parsed = ParseCostModelVersion(CostModelVersionName(v));
    ASSERT_TRUE(parsed.has_value()) << CostModelVersionName(v);
    EXPECT_EQ(*parsed, v);
  }
  EXPECT_FALSE(ParseCostModelVersion("").has_value());
  EXPECT_FALSE(ParseCostModelVersion("h100-fit-0").has_value());
  EXPECT_EQ(CostModelVersionName(CostModelVersion::kH100Fit2), "h100-fit-2");
}

// fit-3 gives the H200 its own constants and leaves every other device as h100-fit-2 has it,
// so the H100's figures priced under h100-fit-2 stand.
TEST(CostModelVersions, Fit3ChangesTheH200Alone) {
  const auto same = [](const CostModelParameters& a, const CostModelParameters& b) {
    return a.bandwidth_bytes_per_second == b.bandwidth_bytes_per_second &&
           a.dram_latency_seconds == b.dram_latency_seconds &&
           a.launch_seconds == b.launch_seconds &&
           a.grid_barrier_seconds == b.grid_barrier_seconds &&
           a.block_barrier_seconds == b.block_barrier_seconds &&
           a.row_pass_seconds == b.row_pass_seconds &&
           a.reuse_window_bytes == b.reuse_window_bytes &&
           a.assembled_registers == b.assembled_registers && a.issue_seconds == b.issue_seconds &&
           a.dependent_issue_seconds == b.dependent_issue_seconds;
  };
  for (const GpuDevice& d : KnownDevices()) {
    const bool unchanged = same(CostModelParametersFor(d, CostModelVersion::kFit3),
                                CostModelParametersFor(d, CostModelVersion::kH100Fit2));
    EXPECT_EQ(unchanged, d.name != "H200") << d.name;
  }
  // The H200's fit: what a streaming kernel reaches is below its datasheet, and its loaded
  // DRAM latency above the H100's.
  const GpuDevice& h200 = *FindDevice("H200");
  const CostModelParameters fit3 = CostModelParametersFor(h200, CostModelVersion::kFit3);
  EXPECT_LT(fit3.bandwidth_bytes_per_second, h200.hbm_bytes_per_second);
  EXPECT_GT(fit3.dram_latency_seconds,
            CostModelParametersFor(h200, CostModelVersion::kH100Fit2).dram_latency_seconds);
  EXPECT_GT(fit3.issue_seconds, 0.0);
  // Plans for it are searched on the H100's figures (cost_model.h); every other device is
  // searched on its own.
  EXPECT_EQ(PlanningDevice(h200).name, "H100");
  for (const GpuDevice& d : KnownDevices()) {
    if (d.name != "H200") {
      EXPECT_EQ(&PlanningDevice(d), &d) << d.name;
    }
  }
}

// fit-4 keeps every constant of fit-3 and adds its two terms: the block start interval
// where a GPU measured one (the H100 and the H200), and partial waves drawing what their loads
// in flight allow on every device.
TEST(CostModelVersions, Fit4AddsItsTwoTermsToFit3sConstants) {
  for (const GpuDevice& d : KnownDevices()) {
    CostModelParameters fit4 = CostModelParametersFor(d, CostModelVersion::kFit4);
    const CostModelParameters fit3 = CostModelParametersFor(d, CostModelVersion::kFit3);
    EXPECT_FALSE(fit3.partial_rounds_share_bandwidth) << d.name;
    EXPECT_EQ(fit3.block_dispatch_seconds, 0.0) << d.name;
    EXPECT_TRUE(fit4.partial_rounds_share_bandwidth) << d.name;
    EXPECT_EQ(fit4.block_dispatch_seconds > 0, d.name == "H100" || d.name == "H200") << d.name;
    EXPECT_LT(fit4.block_dispatch_seconds, 200e-9) << d.name;
    fit4.partial_rounds_share_bandwidth = false;
    fit4.block_dispatch_seconds = 0;
    EXPECT_EQ(fit4.bandwidth_bytes_per_second, fit3.bandwidth_bytes_per_second) << d.name;
    EXPECT_EQ(fit4.dram_latency_seconds, fit3.dram_latency_seconds) << d.name;
    EXPECT_EQ(fit4.issue_seconds, fit3.issue_seconds) << d.name;
    EXPECT_EQ(fit4.reuse_window_bytes, fit3.reuse_window_bytes) << d.name;
  }
}

// fit-5 is fit-4 with blocks dealt to SMs as slots free, on every device.
TEST(CostModelVersions, Fit5DealsBlocksOnFit4sTerms) {
  for (const GpuDevice& d : KnownDevices()) {
    CostModelParameters fit5 = CostModelParametersFor(d, CostModelVersion::kFit5);
    const CostModelParameters fit4 = CostModelParametersFor(d, CostModelVersion::kFit4);
    EXPECT_FALSE(fit4.dealt_blocks) << d.name;
    EXPECT_TRUE(fit5.dealt_blocks) << d.name;
    EXPECT_EQ(fit5.block_dispatch_seconds, fit4.block_dispatch_seconds) << d.name;
    EXPECT_EQ(fit5.partial_rounds_share_bandwidth, fit4.partial_rounds_share_bandwidth) << d.name;
    EXPECT_EQ(fit5.bandwidth_bytes_per_second, fit4.bandwidth_bytes_per_second) << d.name;
    EXPECT_EQ(fit5.dram_latency_seconds, fit4.dram_latency_seconds) << d.name;
    EXPECT_EQ(fit5.issue_seconds, fit4.issue_seconds) << d.name;
  }
}

// One kernel launch's duration as Nsight Compute recorded it (`--csv` of gpu__time_duration).
struct RecordedLaunch {
  std::string kernel;
  int64_t block_threads = 0;
  int64_t grid = 0;
  double nanoseconds = 0;
};

// Splits one line of Nsight Compute's CSV: every field quoted, commas inside quotes kept.
std::vector<std::string> SplitQuotedCsv(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.push_back(field);
      field.clear();
    } else {
      field += c;
    }
  }
  fields.push_back(field);
  return fields;
}

// "(128, 1, 1)" -> 128; "12,595,200" -> 12595200.
int64_t ProductOf(const std::string& dims) {
  int64_t product = 1;
  std::istringstream in(dims.substr(dims.find('(') + 1));
  for (int64_t d; in >> d;) {
    product *= d;
    in.ignore(2);
  }
  return product;
}
double NumberOf(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), ','), text.end());
  return std::stod(text);
}

// A committed set's CSV file under testdata/gpu, read a line at a time after its header.
class CommittedCsv {
 public:
  explicit CommittedCsv(const std::string& relative)
      : in_(std::string(STITCH_SOURCE_DIR) + "/testdata/gpu/" + relative) {
    EXPECT_TRUE(in_.good()) << relative;
    std::string line;
    std::getline(in_, line);
    header_ = SplitQuotedCsv(line);
  }
  // The index of the column named `name`; past the header's last where there is none.
  size_t Column(const char* name) const {
    return static_cast<size_t>(std::find(header_.begin(), header_.end(), name) - header_.begin());
  }
  // Reads the next line's fields into `fields`; false at the end of the file.
  bool Next(std::vector<std::string>& fields) {
    std::string line;
    if (!std::getline(in_, line)) return false;
    fields = SplitQuotedCsv(line);
    return true;
  }

 private:
  std::ifstream in_;
  std::vector<std::string> header_;
};

// The gpu__time_duration records of a committed set's Nsight Compute file.
std::vector<RecordedLaunch> ReadLaunchDurations(const std::string& relative) {
  CommittedCsv csv(relative);
  const size_t kernel = csv.Column("Kernel Name"), block = csv.Column("Block Size"),
               grid = csv.Column("Grid Size"), metric = csv.Column("Metric Name"),
               value = csv.Column("Metric Value");
  std::vector<RecordedLaunch> launches;
  for (std::vector<std::string> f; csv.Next(f);) {
    if (f.size() <= value || f[metric] != "gpu__time_duration.sum") continue;
    launches.push_back({f[kernel], ProductOf(f[block]), ProductOf(f[grid]), NumberOf(f[value])});
  }
  return launches;
}

// fit-5's dealt blocks are read off the H200's mapping sweep: of its loop grids of one pass a
// block past one wave (the capped default grids of 32 blocks an SM loop, and are left out),
// each whose waves do not come out even, stretched by lockstep rounds by more than 5%, ran
// closer to its busiest SM's share of the blocks than to those rounds, against the model's
// price without either (the sweep's model_unstretched_us).
TEST(CostModelVersions, Fit5DealtBlocksAreTheSweepsUnevenGrids) {
  const GpuDevice& h200 = *FindDevice("H200");
  CommittedCsv csv("h200/2026-11-30_844bafc/mappings.csv");
  const size_t kernel = csv.Column("kernel_name"), mapping = csv.Column("mapping"),
               blocks = csv.Column("blocks"), waves = csv.Column("waves"),
               unstretched = csv.Column("model_unstretched_us"), measured = csv.Column("kernel_us");
  int uneven = 0;
  for (std::vector<std::string> f; csv.Next(f);) {
    const auto has = [&](const char* text) { return f[mapping].find(text) != std::string::npos; };
    if (f.size() <= measured || f[kernel].find("_loop") == std::string::npos || has("kept") ||
        has("tile") || has(":") || f[waves].empty()) {
      continue;  // not a plain loop grid (kept columns, transpose tiles, whole plans)
    }
    const int64_t b = std::stoll(f[blocks]);
    const double w = std::stod(f[waves]);
    const double rounds = std::ceil(w) / w;
    if (w <= 1 || b == int64_t{32} * h200.sms || rounds <= 1.05) continue;
    const double share =
        static_cast<double>((b + h200.sms - 1) / h200.sms * h200.sms) / static_cast<double>(b);
    const double ran = std::stod(f[measured]) / std::stod(f[unstretched]);
    SCOPED_TRACE(f[kernel] + " " + f[mapping]);
    EXPECT_LT(std::abs(ran - share), std::abs(ran - rounds));
    ++uneven;
  }
  EXPECT_GE(uneven, 7);
}

// fit-4's block start interval is read off the sets' loops of many short blocks: those of 128
// threads with at least 1,000 blocks an SM, whose time per block per SM is within 5% of the
// least any of them took (the loops their starts bound, however many bytes they moved). The
// interval each device's fit-4 carries is within 5% of their median.
TEST(CostModelVersions, Fit4BlockStartsAreTheMeasuredLoopsOfShortBlocks) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> sets = {
      {"H100", {"h100_80gb_hbm3/2026-11-27_0775291/stitch_kernels_ncu_raw.csv"}},
      {"H200",
       {"h200/2026-11-28_afdf996/ncu_rows_1_5_18_29.csv",
        "h200/2026-11-28_afdf996/ncu_rows_10_12_17_19.csv",
        "h200/2026-11-28_afdf996/ncu_rows_4_16_20_24_25_26.csv"}},
  };
  for (const auto& [name, files] : sets) {
    const GpuDevice& d = *FindDevice(name);
    std::vector<double> per_block;
    for (const std::string& file : files) {
      for (const RecordedLaunch& l : ReadLaunchDurations(file)) {
        const int64_t per_sm = (l.grid + d.sms - 1) / d.sms;
        if (l.kernel.find("_loop") == std::string::npos || l.block_threads != 128 ||
            per_sm < 1000) {
          continue;
        }
        per_block.push_back(l.nanoseconds / static_cast<double>(per_sm));
      }
    }
    ASSERT_FALSE(per_block.empty()) << name;
    const double least = *std::min_element(per_block.begin(), per_block.end());
    std::vector<double> bound;
    for (double ns : per_block) {
      if (ns <= least * 1.05) bound.push_back(ns);
    }
    std::sort(bound.begin(), bound.end());
    ASSERT_GE(bound.size(), 4u) << name;
    const double median = bound[bound.size() / 2] * 1e-9;
    const double fitted = CostModelParametersFor(d, CostModelVersion::kFit4).block_dispatch_seconds;
    EXPECT_NEAR(fitted, median, 0.05 * median)
        << name << ": " << bound.size() << " loops bound by their starts, " << per_block.size()
        << " of many short blocks";
  }
}

TEST(CostModelVersions, Fit2AddsTheIssueTermToFit1sConstants) {
  for (const GpuDevice& d : KnownDevices()) {
    const CostModelParameters sheet = CostModelParametersFor(d, CostModelVersion::kDatasheet);
    const CostModelParameters fit1 = CostModelParametersFor(d, CostModelVersion::kH100Fit1);
    const CostModelParameters fit2 = CostModelParametersFor(d, CostModelVersion::kH100Fit2);
    EXPECT_EQ(sheet.issue_seconds, 0.0) << d.name;
    EXPECT_EQ(fit1.issue_seconds, 0.0) << d.name;
    // The constants fit-1 has stay as they were, so the plans priced before assembly (the
    // never-slower choice) compare the same way under both versions.
    EXPECT_EQ(fit2.bandwidth_bytes_per_second, fit1.bandwidth_bytes_per_second) << d.name;
    EXPECT_EQ(fit2.dram_latency_seconds, fit1.dram_latency_seconds) << d.name;
    EXPECT_EQ(fit2.launch_seconds, fit1.launch_seconds) << d.name;
    EXPECT_EQ(fit2.grid_barrier_seconds, fit1.grid_barrier_seconds) << d.name;
    EXPECT_EQ(fit2.block_barrier_seconds, fit1.block_barrier_seconds) << d.name;
    EXPECT_EQ(fit2.row_pass_seconds, fit1.row_pass_seconds) << d.name;
    EXPECT_EQ(fit2.reuse_window_bytes, fit1.reuse_window_bytes) << d.name;
    if (d.name == "H100" || d.name == "H200") {
      // A scheduler issues at most one warp instruction per cycle (under 2 GHz), and one
      // warp's dependent instructions come several cycles apart.
      EXPECT_GT(fit2.issue_seconds, 0.4e-9) << d.name;
      EXPECT_GT(fit2.dependent_issue_seconds, 2 * fit2.issue_seconds) << d.name;
    } else {
      EXPECT_EQ(fit2.issue_seconds, 0.0) << d.name;
    }
  }
}

// An issue-heavy loop kernel: `instructions` per pass of 256 threads x 4 elements.
KernelSpec IssueHeavy(uint32_t blocks, int64_t elements, int instructions, int registers) {
  KernelSpec k = Copy(blocks, elements * 4, 4, 16);
  k.mapping.assembled_registers = registers;
  k.mapping.assembled_instructions = instructions;
  return k;
}

TEST(CostModel, IssueTermCountsTheCubinsInstructionsOnTheBusiestSm) {
  const GpuDevice h100 = H100();
  CostModelParameters p = CostModelParametersFor(h100, CostModelVersion::kH100Fit2);
  p.issue_seconds = 0.5e-9;
  p.dependent_issue_seconds = 2e-9;
  // 132 x 8 blocks of 256 threads at 32 registers: 8 resident blocks, 64 warps per SM, 16
  // per scheduler, enough to cover a warp's dependent issues. 2^26 elements are 65,536
  // passes, 63 on the busiest slot.
  const int64_t elements = int64_t{1} << 26;
  KernelSpec k = IssueHeavy(132 * 8, elements, 2000, 32);
  const KernelCost c = NewAnalyticalCostModel(h100, p)->EstimateKernel(Graph(), k);
  ASSERT_EQ(c.resident_blocks_per_sm, 8);
  const double expected = 63.0 * 2000 * 16 * p.issue_seconds;
  EXPECT_NEAR(c.issue_seconds, expected, expected * 1e-9);
  EXPECT_GT(c.issue_seconds, c.memory_seconds);
  EXPECT_NEAR(c.seconds, c.issue_seconds + c.launch_seconds, c.seconds * 1e-9);
  // With 200 registers one block is resident: 2 warps per scheduler, fewer than the 4 it
  // takes to cover a warp's dependent issues, so each warp's chain sets the pace.
  k.mapping.launch.grid = {132, 1, 1};
  k.mapping.assembled_registers = 200;
  const KernelCost one = NewAnalyticalCostModel(h100, p)->EstimateKernel(Graph(), k);
  ASSERT_EQ(one.resident_blocks_per_sm, 1);
  const double chain = 497.0 * 2000 * p.dependent_issue_seconds;
  EXPECT_NEAR(one.issue_seconds, chain, chain * 1e-9);
  // The versions without the term, and kernels without an instruction count, ignore it.
  for (CostModelVersion v : {CostModelVersion::kDatasheet, CostModelVersion::kH100Fit1}) {
    EXPECT_EQ(NewAnalyticalCostModel(h100, v)->EstimateKernel(Graph(), k).issue_seconds, 0.0);
  }
  k.mapping.assembled_instructions = 0;
  EXPECT_EQ(NewAnalyticalCostModel(h100, p)->EstimateKernel(Graph(), k).issue_seconds, 0.0);
}

TEST(CostModelVersions, DatasheetIsTheDeviceTableAndTheFitChangesOnlyWhatItFitted) {
  for (const GpuDevice& d : KnownDevices()) {
    const CostModelParameters sheet = CostModelParametersFor(d, CostModelVersion::kDatasheet);
    EXPECT_EQ(sheet.bandwidth_bytes_per_second, d.hbm_bytes_per_second) << d.name;
    EXPECT_EQ(sheet.dram_latency_seconds, d.dram_latency_seconds) << d.name;
    EXPECT_EQ(sheet.launch_seconds, d.launch_seconds) << d.name;
    EXPECT_EQ(sheet.reuse_window_bytes, 0.0) << d.name;
    EXPECT_FALSE(sheet.assembled_registers) << d.name;
    const CostModelParameters fit = CostModelParametersFor(d, CostModelVersion::kH100Fit1);
    // Streaming kernels reach part of the datasheet bandwidth, never more.
    EXPECT_GT(fit.bandwidth_bytes_per_second, 0.5 * d.hbm_bytes_per_second) << d.name;
    EXPECT_LE(fit.bandwidth_bytes_per_second, d.hbm_bytes_per_second) << d.name;
    EXPECT_GT(fit.reuse_window_bytes, 0.0) << d.name;
    EXPECT_LE(fit.reuse_window_bytes, static_cast<double>(d.l2_bytes)) << d.name;
    EXPECT_TRUE(fit.assembled_registers) << d.name;
    if (d.name != "H100" && d.name != "H200") {
      // The times were fitted on an H100; other devices keep their table's.
      EXPECT_EQ(fit.launch_seconds, d.launch_seconds) << d.name;
      EXPECT_EQ(fit.dram_latency_seconds, d.dram_latency_seconds) << d.name;
    }
  }
}

// A loop-mode row kernel: `rows` rows of `row_bytes`, one row per 256-thread block, reading
// each row `passes` times.
KernelSpec LoopModeRows(uint32_t blocks, int64_t rows, int64_t row_bytes, int passes) {
  KernelSpec k;
  k.name = "rows";
  k.kind = KernelKind::kRowStitch;
  ThreadMapping& m = k.mapping;
  m.launch.grid = {blocks, 1, 1};
  m.launch.block = {256, 1, 1};
  m.threads_per_row = 256;
  m.rows_per_block = 1;
  m.vector_width = 4;
  m.load_bytes_in_flight_per_thread = 16;
  m.work_items = rows;
  m.bytes_loaded = rows * row_bytes;
  m.bytes_stored = rows * row_bytes;
  m.reread_bytes_per_item = (passes - 1) * row_bytes;
  return k;
}

TEST(CostModel, RereadsAreDramTrafficOnlyBeyondTheReuseWindow) {
  CostModelParameters p = CostModelParametersFor(H100(), CostModelVersion::kH100Fit1);
  // 1056 resident blocks each hold a row: 1056 x 2 x 64 KiB = 132 MiB between a row's
  // first read and its re-read, far beyond any L2 window.
  const int64_t rows = 16384, row_bytes = 64 * 1024;
  const KernelSpec big = LoopModeRows(1056, rows, row_bytes, 3);
  KernelCost c = NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), big);
  EXPECT_EQ(c.global_bytes, 2 * rows * row_bytes);
  EXPECT_EQ(c.dram_bytes, c.global_bytes + rows * 2 * row_bytes);
  // With a window that holds every row in flight the re-reads hit L2.
  p.reuse_window_bytes = 1e12;
  c = NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), big);
  EXPECT_EQ(c.dram_bytes, c.global_bytes);
  // The datasheet version takes every re-read as a hit.
  EXPECT_EQ(DatasheetModel(H100())->EstimateKernel(Graph(), big).dram_bytes, c.global_bytes);
}

TEST(CostModel, ARowInFlightHoldsItsDistinctBytesInTheWindowNotItsRereads) {
  CostModelParameters p = CostModelParametersFor(H100(), CostModelVersion::kH100Fit1);
  // 130 rows of 200 KB in flight, each read three times: 26 MB of distinct rows, 52 MB of
  // re-reads. A window of 30 MB holds the rows, so every re-read hits.
  const int64_t rows = 8192, row_bytes = 200 * 1000;
  KernelSpec k = LoopModeRows(130, rows, row_bytes, 3);
  p.reuse_window_bytes = 30e6;
  const std::unique_ptr<CostModel> model = NewAnalyticalCostModel(H100(), p);
  k.mapping.reread_footprint_bytes_per_item = row_bytes;
  KernelCost c = model->EstimateKernel(Graph(), k);
  EXPECT_EQ(c.dram_bytes, c.global_bytes);
  // Without a footprint the re-read bytes stand for it (52 MB): all of them miss.
  k.mapping.reread_footprint_bytes_per_item = 0;
  c = model->EstimateKernel(Graph(), k);
  EXPECT_EQ(c.dram_bytes, c.global_bytes + rows * 2 * row_bytes);
  // Twice the rows in flight outgrow the window whatever the footprint.
  k = LoopModeRows(260, rows, row_bytes, 3);
  k.mapping.reread_footprint_bytes_per_item = row_bytes;
  c = model->EstimateKernel(Graph(), k);
  EXPECT_EQ(c.dram_bytes, c.global_bytes + rows * 2 * row_bytes);
}

TEST(CostModel, StridedSectorsMissOnlyWhenTheirReuseDistanceOutgrowsTheWindow) {
  CostModelParameters p = CostModelParametersFor(H100(), CostModelVersion::kH100Fit1);
  KernelSpec k = Copy(1056, kGiB, 4, 16);
  // Half the loads are 2-byte elements read through a transpose: a sector per element.
  k.mapping.strided_input_bytes = kGiB / 2;
  k.mapping.strided_sector_bytes = kGiB / 2 / 2 * 32;
  k.mapping.strided_reuse_bytes = static_cast<int64_t>(p.reuse_window_bytes) + 1;
  KernelCost far = NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), k);
  EXPECT_EQ(far.dram_bytes, far.global_bytes + kGiB / 2 / 2 * 32 - kGiB / 2);
  k.mapping.strided_reuse_bytes = static_cast<int64_t>(p.reuse_window_bytes) / 2;
  KernelCost near = NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), k);
  EXPECT_EQ(near.dram_bytes, near.global_bytes);
  EXPECT_GT(far.seconds, 4 * near.seconds);
}

// A strided read whose sectors stay in L2 until the rest of them is used fetches nothing more
// from DRAM, but a warp's load still moves a sector per element through L2: 8 GiB of sectors
// for half a GiB of f16 elements, which L2 serves in 0.9 ms where DRAM moves the copy's bytes
// in 0.5.
TEST(CostModel, StridedSectorsThatHitL2StillCrossIt) {
  const CostModelParameters p = CostModelParametersFor(H100(), kCurrentCostModel);
  ASSERT_GT(p.l2_bytes_per_second, p.bandwidth_bytes_per_second);
  KernelSpec k = Copy(1056, kGiB, 4, 16);
  const KernelCost coalesced = NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), k);
  k.mapping.strided_input_bytes = kGiB / 2;
  k.mapping.strided_sector_bytes = kGiB / 2 / 2 * 32;
  k.mapping.strided_reuse_bytes = static_cast<int64_t>(p.reuse_window_bytes) / 2;
  const KernelCost strided = NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), k);
  EXPECT_EQ(strided.dram_bytes, coalesced.dram_bytes);
  const double l2_bytes = static_cast<double>(2 * kGiB + kGiB / 2 / 2 * 32 - kGiB / 2);
  EXPECT_GE(strided.memory_seconds, l2_bytes / p.l2_bytes_per_second);
  EXPECT_GT(strided.seconds, 1.5 * coalesced.seconds);
  // Without an L2 figure (a version before fit-3, a device nobody measured) the read is
  // priced as a coalesced one.
  EXPECT_DOUBLE_EQ(NewAnalyticalCostModel(H100(), CostModelVersion::kH100Fit2)
                       ->EstimateKernel(Graph(), k)
                       .seconds,
                   NewAnalyticalCostModel(H100(), CostModelVersion::kH100Fit2)
                       ->EstimateKernel(Graph(), Copy(1056, kGiB, 4, 16))
                       .seconds);
  CostModelParameters unmeasured = p;
  unmeasured.l2_bytes_per_second = 0;
  EXPECT_DOUBLE_EQ(NewAnalyticalCostModel(H100(), unmeasured)->EstimateKernel(Graph(), k).seconds,
                   coalesced.seconds);
  // Fewer bytes of each sector used (f32 elements, 8 a sector) cost less.
  k.mapping.strided_sector_bytes = kGiB / 2 / 4 * 32;
  EXPECT_LT(NewAnalyticalCostModel(H100(), p)->EstimateKernel(Graph(), k).seconds, strided.seconds);
}

TEST(CostModel, AssembledRegistersSetOccupancyInTheFittedVersionOnly) {
  KernelSpec k = Copy(132 * 8, kGiB, 4, 16);
  k.mapping.registers_per_thread = 32;
  const CostModelParameters fit = CostModelParametersFor(H100(), CostModelVersion::kH100Fit1);
  const KernelCost estimated = NewAnalyticalCostModel(H100(), fit)->EstimateKernel(Graph(), k);
  // 200 registers: a 256-thread block needs 8 warps x 6400 = 51200 of an SM's 65536.
  k.mapping.assembled_registers = 200;
  const KernelCost assembled = NewAnalyticalCostModel(H100(), fit)->EstimateKernel(Graph(), k);
  EXPECT_EQ(estimated.resident_blocks_per_sm, 8);
  EXPECT_EQ(assembled.resident_blocks_per_sm, 1);
  EXPECT_GT(assembled.seconds, estimated.seconds);
  EXPECT_EQ(DatasheetModel(H100())->EstimateKernel(Graph(), k).resident_blocks_per_sm, 8);
}

}  // namespace
}  // namespace stitch
