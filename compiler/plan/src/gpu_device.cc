#include "stitch/plan/gpu_device.h"

#include <algorithm>

#include "int_math.h"

namespace stitch {

const std::vector<GpuDevice>& KnownDevices() {
  // Each field's source per device, and how it matches: compiler/plan/COST_MODEL_SOURCES.md.
  // SM counts, memory bandwidth and L2 size come from NVIDIA's whitepapers and datasheets (SXM
  // parts for A100, H100 and H200), or from third-party listings [TPU] where NVIDIA gives
  // none; threads, blocks and shared memory per SM from the programming guide's table of
  // compute capabilities [CG] and CCCL's arch_traits.cuh [CCCL]. launch_seconds matches
  // gpu-benches' back-to-back stream launches on H200 [GB]; it is unmeasured elsewhere.
  static const std::vector<GpuDevice> devices = [] {
    // H100 SXM: 132 SMs, 50 MB L2, up to 228 KB shared memory per SM (H100 whitepaper);
    // 3.35 TB/s (H100 datasheet).
    GpuDevice h100;
    h100.name = "H100";
    h100.sms = 132;
    h100.hbm_bytes_per_second = 3.35e12;
    h100.launch_seconds = 2.5e-6;
    h100.shared_bytes_per_sm = 228 * 1024;
    h100.l2_bytes = 50LL << 20;
    // L2 bandwidth: [GB] gpu-l2-cache reads L2-resident sets of 20-37 MB at 9.5-9.9 TB/s on
    // the H200 (h200.txt) and 6.8-7.0 TB/s on the H100 PCIe's 114 SMs (h100_pcie.txt). The
    // H100 SXM has the H200's die, SM count and clocks, and L2 is on the die: it takes the
    // H200's figure.
    h100.l2_bytes_per_second = 9.5e12;
    // H200: 4.8 TB/s (NVIDIA's H200 page). SMs as H100's: the same GH100 die, and NVIDIA
    // lists none; gpu-benches' H200 runs show 132 SMs [GB]. L2: 60 MiB, the driver's
    // l2CacheSize on the H200 of testdata/gpu/h200/2026-11-28_afdf996 (device.json), where
    // the H100 sets read 50 MiB.
    GpuDevice h200 = h100;
    h200.name = "H200";
    h200.hbm_bytes_per_second = 4.8e12;
    h200.l2_bytes = 60LL << 20;
    // A100 SXM 80GB: 108 SMs, 40 MB L2, up to 164 KB shared memory per SM (A100 whitepaper);
    // 2,039 GB/s (datasheet; the 40GB part has 1,555 GB/s). Grid barrier: the top of [GB]'s
    // 1.3-1.6 us.
    GpuDevice a100;
    a100.name = "A100";
    a100.sms = 108;
    a100.hbm_bytes_per_second = 2.039e12;
    a100.grid_barrier_seconds = 1.6e-6;
    a100.launch_seconds = 2.5e-6;
    a100.shared_bytes_per_sm = 164 * 1024;
    a100.max_shared_bytes_per_block = 163 * 1024;
    a100.l2_bytes = 40LL << 20;
    a100.l2_bytes_per_second = 5.3e12;  // [GB] gpu-l2-cache/a100_80.txt: 5.3-5.5 TB/s, 3-25 MB
    // sm_86 and sm_89 keep 1536 threads per SM; GDDR6 parts. Per-SM limits: [CG], [CCCL].
    // A10: 600 GB/s (datasheet); 72 SMs and 6 MB L2 from third-party listings [TPU].
    GpuDevice a10 = a100;
    a10.name = "A10";
    a10.sms = 72;
    a10.hbm_bytes_per_second = 600e9;
    a10.max_threads_per_sm = 1536;
    a10.max_blocks_per_sm = 16;
    a10.shared_bytes_per_sm = 100 * 1024;
    a10.max_shared_bytes_per_block = 99 * 1024;
    a10.l2_bytes = 6LL << 20;
    a10.l2_bytes_per_second = 0;  // no measurement of A10, L4 or T4 found
    // L4: 300 GB/s (datasheet); 58 SMs (7,424 cores) and 48 MB L2 from third-party listings
    // [TPU], which disagree on the SM count (some say 60).
    GpuDevice l4 = a10;
    l4.name = "L4";
    l4.sms = 58;
    l4.hbm_bytes_per_second = 300e9;
    l4.max_blocks_per_sm = 24;
    l4.l2_bytes = 48LL << 20;
    // sm_75: 1024 threads and 16 blocks per SM, 64 KiB of shared memory in 256-byte units
    // [OCC], and no shared memory reserved per block (that came with sm_80). T4: 320 GB/s and
    // 2,560 cores, 64 per SM, so 40 SMs (datasheet); 4 MB L2 [TPU].
    GpuDevice t4 = a100;
    t4.name = "T4";
    t4.sms = 40;
    t4.hbm_bytes_per_second = 320e9;
    t4.max_threads_per_sm = 1024;
    t4.max_blocks_per_sm = 16;
    t4.shared_bytes_per_sm = 64 * 1024;
    t4.max_shared_bytes_per_block = 64 * 1024;
    t4.reserved_shared_bytes_per_block = 0;
    t4.shared_allocation_unit = 256;
    t4.l2_bytes = 4LL << 20;
    return std::vector<GpuDevice>{h100, h200, a100, a10, l4, t4};
  }();
  return devices;
}

const GpuDevice* FindDevice(std::string_view name) {
  for (const GpuDevice& d : KnownDevices()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// Registers are 4 bytes each.
int64_t OnChipBytes(const GpuDevice& device) {
  const int64_t per_sm = int64_t{device.registers_per_sm} * 4 + device.shared_bytes_per_sm;
  return device.l2_bytes + int64_t{device.sms} * per_sm;
}

// The rules of CUDA's occupancy calculation (cuda_occupancy.h) for sm_80 and sm_90, each
// limit computed alone and the smallest taken:
//   * threads: blocks take whole warps, max_threads_per_sm / 32 warp slots in all;
//   * block slots: max_blocks_per_sm;
//   * registers: a warp takes registers_per_thread x 32 registers rounded up to the
//     allocation unit, all from one sub-partition of the register file, so each
//     sub-partition holds floor(its registers / a warp's) warps; the launch itself fails when
//     a block's warps, rounded up to the sub-partition count, need more than the per-block
//     register limit, or a thread more than the per-thread limit;
//   * shared memory: a block takes its static shared memory plus the driver's reserved bytes,
//     rounded up to the allocation unit, out of the SM's shared memory (the largest carveout,
//     the driver's choice when a kernel needs shared memory); the launch fails when the static
//     part exceeds the per-block limit.
int ResidentBlocksPerSm(const GpuDevice& device, const ThreadMapping& mapping) {
  const int64_t threads = static_cast<int64_t>(mapping.launch.block_threads());
  if (threads <= 0 || threads > device.max_threads_per_block) return 0;
  constexpr int64_t kWarpSize = 32;
  const int64_t warps = CeilDiv(threads, kWarpSize);
  const int64_t by_threads = device.max_threads_per_sm / kWarpSize / warps;

  const int64_t registers = std::max(mapping.registers_per_thread, 1);
  if (registers > device.max_registers_per_thread) return 0;
  const int64_t sub_partitions = std::max(device.register_sub_partitions, 1);
  const int64_t registers_per_warp =
      RoundUp(registers * kWarpSize, std::max(device.register_allocation_unit, 1));
  if (registers_per_warp * RoundUp(warps, sub_partitions) > device.max_registers_per_block) {
    return 0;
  }
  const int64_t warps_per_sub_partition =
      device.registers_per_sm / sub_partitions / registers_per_warp;
  const int64_t by_registers = warps_per_sub_partition * sub_partitions / warps;

  if (int64_t{mapping.shared_bytes} > device.max_static_shared_bytes_per_block) return 0;
  const int64_t block_shared = int64_t{mapping.shared_bytes} + mapping.dynamic_shared_bytes;
  if (block_shared > device.max_shared_bytes_per_block) return 0;
  const int64_t shared_per_block = RoundUp(block_shared + device.reserved_shared_bytes_per_block,
                                           std::max(device.shared_allocation_unit, 1));
  const int64_t by_shared = shared_per_block > 0 ? device.shared_bytes_per_sm / shared_per_block
                                                 : int64_t{device.max_blocks_per_sm};

  const int64_t blocks = std::min(
      {by_threads, by_registers, by_shared, static_cast<int64_t>(device.max_blocks_per_sm)});
  return static_cast<int>(std::max<int64_t>(blocks, 0));
}

int64_t CoResidentBlocks(const GpuDevice& device, const ThreadMapping& mapping) {
  return int64_t{ResidentBlocksPerSm(device, mapping)} * device.sms;
}

}  // namespace stitch
