// The GPUs stitch plans for: the figures of each that the scheduler and the cost model need,
// and the occupancy arithmetic both share.
//
// Each figure's source, and how closely it matches, is in compiler/plan/COST_MODEL_SOURCES.md;
// tags such as [CG] (CUDA programming guide) and [GB] (gpu-benches) refer to its sources.
//
// Thread-safety: the device table is a constant; every function here is pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/plan/plan.h"

namespace stitch {

struct GpuDevice {
  std::string name;  // "H100"
  // SM count and datasheet memory bandwidth: NVIDIA whitepapers and datasheets, per device in
  // gpu_device.cc (COST_MODEL_SOURCES.md, section 2).
  int sms = 0;
  double hbm_bytes_per_second = 0;
  // No NVIDIA figure. [GB] measured 2.4-2.5 us per back-to-back stream launch on H200; the
  // other devices are unmeasured (COST_MODEL_SOURCES.md, section 3).
  double launch_seconds = 0;  // per kernel, launch plus the tail of the previous one
  // Per-SM limits that bound how many blocks are resident at once. Defaults are sm_80's and
  // sm_90's, from the programming guide's compute-capability table [CG] and CCCL's
  // arch_traits.cuh [CCCL]; the device table sets the others.
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int registers_per_sm = 65536;
  int64_t shared_bytes_per_sm = 0;
  // The most static shared memory one block may declare. 48 KiB: [CG], [CCCL].
  int64_t max_static_shared_bytes_per_block = 48 * 1024;
  // The most shared memory, static and dynamic, one block may use once the kernel opts in
  // (cuFuncSetAttribute's MAX_DYNAMIC_SHARED_SIZE_BYTES): the programming guide's table of
  // compute capabilities [CG], 227 KiB on sm_90, 163 on sm_80, 99 on sm_86 and sm_89, 64 on
  // sm_75. Rows kept in shared memory (ThreadMapping::dynamic_shared_bytes) need it.
  int64_t max_shared_bytes_per_block = 227 * 1024;
  // A grid-wide barrier: the top of [GB]'s 1.0-1.3 us per barrier on H200 (a software
  // barrier like codegen's, timed with a small pass, so an upper bound); the device table sets
  // A100's 1.6 us (COST_MODEL_SOURCES.md, section 3).
  double grid_barrier_seconds = 1.3e-6;
  // A block-wide barrier, as seen by a memory-bound kernel (mostly the pipeline drain).
  // No published figure found; to be settled by bench/gpu.
  double block_barrier_seconds = 40e-9;
  // Latency of a DRAM load under load: with Little's law it gives the bytes that must be in
  // flight to reach full bandwidth. No published loaded figure; derived from [GB]: 375-406 ns
  // unloaded (H100 PCIe, A100), 550-1000 ns under load by Little's law (H200, H100, A100).
  double dram_latency_seconds = 700e-9;
  // L2 size: NVIDIA whitepapers, or third-party listings where NVIDIA gives none. The fitted
  // cost model versions take a share of it as their re-use window.
  int64_t l2_bytes = 0;
  // What L2 serves the SMs, bytes per second, for data resident in it. NVIDIA publishes none:
  // [GB]'s reads of L2-resident sets (COST_MODEL_SOURCES.md, section 2). 0 where no device of
  // the kind was measured: the cost model then leaves L2's bandwidth out.
  double l2_bytes_per_second = 0;
  // Allocation rules of the occupancy calculation (CUDA's cuda_occupancy.h and the
  // programming guide's table of compute capabilities; the same for sm_80 and sm_90).
  // 1024 threads per block: [CG], [CCCL].
  int max_threads_per_block = 1024;
  // Registers are allocated per warp, in units of this many ([OCC]
  // cudaOccRegAllocationGranularity).
  int register_allocation_unit = 256;
  // The register file is split evenly between the SM's warp schedulers; a warp takes all
  // its registers from one of them ([OCC] cudaOccSubPartitionsPerMultiprocessor).
  int register_sub_partitions = 4;
  // 255 registers per thread, 64 K per block: [CG], [CCCL].
  int max_registers_per_thread = 255;
  int max_registers_per_block = 65536;
  // Shared memory is allocated per block in units of this many bytes, after adding the
  // bytes the driver reserves for every block (sm_80 and later). [OCC]
  // cudaOccSMemAllocationGranularity gives 128 for sm_80 to sm_90 (256 for sm_7x); [CCCL]
  // gives the 1 KiB reserved per block.
  int shared_allocation_unit = 128;
  int64_t reserved_shared_bytes_per_block = 1024;
  // A cap on the grid of kernels with grid barriers below the co-residency bound (0: none),
  // for hosts that leave part of the GPU to other work, and for the emulator, which runs
  // every thread of such a grid at once. A policy knob, not a hardware figure.
  int64_t max_persistent_grid_blocks = 0;
};

// Returns the device table (T4, A100, A10, L4, H100, H200). Which device a compile target
// plans for is Target's business (target.h).
const std::vector<GpuDevice>& KnownDevices();

// Returns the device named `name` ("H100"), or nullptr when the table has none.
const GpuDevice* FindDevice(std::string_view name);

// Returns the bytes `device` can hold on chip at once: its L2 and every SM's registers and
// shared memory. What a statistic over a larger tensor leaves behind must come from DRAM again
// (ForcedRereadBytes).
int64_t OnChipBytes(const GpuDevice& device);

// Returns how many blocks of `mapping`'s launch can be resident on one SM at once, limited
// by threads, block slots, registers and shared memory; 0 when one block does not fit.
int ResidentBlocksPerSm(const GpuDevice& device, const ThreadMapping& mapping);

// Returns the most blocks of `mapping`'s launch that are guaranteed co-resident on the
// whole device: ResidentBlocksPerSm times the SM count. A kernel with grid-wide barriers
// deadlocks unless its grid is at most this.
int64_t CoResidentBlocks(const GpuDevice& device, const ThreadMapping& mapping);

}  // namespace stitch
