// The GPUs stitch plans for: the figures of each that the scheduler and the cost model need,
// and the occupancy arithmetic both share.
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
  int sms = 0;
  double hbm_bytes_per_second = 0;
  double launch_seconds = 0;  // per kernel, launch plus the tail of the previous one
  // Per-SM limits that bound how many blocks are resident at once.
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int registers_per_sm = 65536;
  int64_t shared_bytes_per_sm = 0;
  // The most static shared memory one block may declare (dynamic shared memory can go
  // further, but stitch kernels use static arrays only).
  int64_t max_static_shared_bytes_per_block = 48 * 1024;
  // A grid-wide barrier (AStitch measured ~2.5 us on V100-class parts; Hopper's is similar).
  double grid_barrier_seconds = 2.5e-6;
  // A block-wide barrier, as seen by a memory-bound kernel (mostly the pipeline drain).
  double block_barrier_seconds = 40e-9;
  // Latency of a DRAM load under load: with Little's law it gives the bytes that must be in
  // flight to reach full bandwidth.
  double dram_latency_seconds = 700e-9;
  int64_t l2_bytes = 0;
  // Allocation rules of the occupancy calculation (CUDA's cuda_occupancy.h and the
  // programming guide's table of compute capabilities; the same for sm_80 and sm_90).
  int max_threads_per_block = 1024;
  // Registers are allocated per warp, in units of this many.
  int register_allocation_unit = 256;
  // The register file is split evenly between the SM's warp schedulers; a warp takes all
  // its registers from one of them.
  int register_sub_partitions = 4;
  int max_registers_per_thread = 255;
  int max_registers_per_block = 65536;
  // Shared memory is allocated per block in units of this many bytes, after adding the
  // bytes the driver reserves for every block (sm_80 and later).
  int shared_allocation_unit = 128;
  int64_t reserved_shared_bytes_per_block = 1024;
  // A cap on the grid of kernels with grid barriers below the co-residency bound (0: none),
  // for hosts that leave part of the GPU to other work, and for the emulator, which runs
  // every thread of such a grid at once.
  int64_t max_persistent_grid_blocks = 0;
};

// Returns the device table (T4, A100, A10, L4, H100, H200). Which device a compile target
// plans for is Target's business (target.h).
const std::vector<GpuDevice>& KnownDevices();

// Returns the device named `name` ("H100"), or nullptr when the table has none.
const GpuDevice* FindDevice(std::string_view name);

// Returns how many blocks of `mapping`'s launch can be resident on one SM at once, limited
// by threads, block slots, registers and shared memory; 0 when one block does not fit.
int ResidentBlocksPerSm(const GpuDevice& device, const ThreadMapping& mapping);

// Returns the most blocks of `mapping`'s launch that are guaranteed co-resident on the
// whole device: ResidentBlocksPerSm times the SM count. A kernel with grid-wide barriers
// deadlocks unless its grid is at most this.
int64_t CoResidentBlocks(const GpuDevice& device, const ThreadMapping& mapping);

}  // namespace stitch
