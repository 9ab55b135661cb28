// Runs a compiled graph's kernels on the host emulator, in plan order, with buffers for
// parameters, temporaries and outputs.
//
// Thread-safety: uses the given Emulator, so one call per Emulator at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stitch/codegen/codegen.h"
#include "stitch/emulator/emulator.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"
#include "stitch/reference/tensor.h"

namespace stitch {

struct EmulatedRun {
  std::vector<Tensor> outputs;          // one per graph output
  std::vector<LaunchStats> per_kernel;  // one per kernel, in launch order
  uint64_t global_bytes() const;        // loaded + stored over all kernels
};

// The launch options that bounds-check every access of `kernel` (compiled from `g`) against
// the buffers of its parameter nodes and its workspace, each named after its node.
LaunchOptions CheckedLaunch(const Graph& g, const CompiledKernel& kernel);

// Launches `kernels` (from CompileGraph on `g`) on `emulator` with `params` ordered by
// parameter number, every access bounds-checked (CheckedLaunch). Output and temporary buffers start
// filled with 0xff bytes (NaN for floats), so an element a kernel forgets to write shows up as a
// mismatch. Every buffer is 256-byte aligned, as the GPU's are. Each kernel with workspace_bytes >
// 0 gets a workspace of its own, zero-filled, as its last argument (codegen.h). Kernels of a
// shape-generic compile take `outer_extent` after it: `g` is then the compiled graph at that
// extent (AtExtent), which sizes every buffer; INVALID_ARGUMENT when it is missing.
StatusOr<EmulatedRun> RunOnEmulator(const Graph& g, const std::vector<CompiledKernel>& kernels,
                                    const std::vector<Tensor>& params, Emulator& emulator,
                                    int64_t outer_extent = 0);

// Which blocks of each launch a sampled run executes, beside the first, the last and the
// boundary blocks (schedule.h's BoundaryBlocks).
struct BlockSampling {
  int random_blocks = 8;  // drawn without repetition from `seed`
  uint64_t seed = 0;
};

// One launch of a sampled run: which kernel ran, at which geometry, on which blocks.
struct SampledLaunch {
  std::string kernel;
  KernelKind kind = KernelKind::kLoop;
  LaunchDims launch;
  std::vector<uint64_t> blocks;  // linear block indices that ran, ascending
  LaunchStats stats;
};

struct SampledRun {
  std::vector<SampledLaunch> launches;  // one per kernel, in launch order
  uint64_t blocks_run() const;          // over all launches
  uint64_t blocks_total() const;        // of the launches' full grids
};

// Returns the blocks of `spec`'s launch a sampled run executes: block 0, the last block,
// BoundaryBlocks(g, spec) and sampling.random_blocks more, ascending and distinct.
std::vector<uint64_t> SampleBlocks(const Graph& g, const KernelSpec& spec,
                                   const BlockSampling& sampling);

// Runs the kernels that ship for `g` (`plan` and `kernels` of one CompileGraph, scheduled for
// the target's own grid, not the emulator's cap) at their full launch geometry and on
// buffers of the graph's full shapes, executing a sample of each launch's blocks
// (SampleBlocks), with every global access bounds-checked (CheckedLaunch). The buffers are
// zero-filled and mapped lazily, so the parts no sampled block touches cost nothing; the
// values computed are not checked, since the blocks left out do not run: comparing numbers
// with the interpreter is RunOnEmulator's business. Returns the first out-of-bounds access
// (INTERNAL, naming the kernel, block, thread, buffer and offset) or any other launch
// error; RESOURCE_EXHAUSTED when a buffer cannot be mapped.
// Shape-generic kernels take `outer_extent`, with `g` at that extent, as RunOnEmulator's.
StatusOr<SampledRun> RunSampledOnEmulator(const Graph& g, const FusionPlan& plan,
                                          const std::vector<CompiledKernel>& kernels,
                                          const BlockSampling& sampling, Emulator& emulator,
                                          int64_t outer_extent = 0);

// Which blocks of each launch a prefix run executes: blocks 0, 1, 2, ... in the order the
// GPU dispatches them, so that each block's rows, strides and neighbours are the full
// launch's, and the re-use distances between blocks are the GPU's.
struct PrefixSampling {
  // Enough blocks for their share of the launch's modelled traffic (the plan's bytes_loaded
  // + bytes_stored, split evenly over the grid) to reach this many bytes, or every block.
  uint64_t model_bytes = uint64_t{64} << 20;
  // A kernel with grid barriers runs its listed blocks at once, at most this many threads
  // (the emulator's limit).
  uint64_t max_grid_barrier_threads = 64 * 1024;
};

// Returns the blocks of `spec`'s launch a prefix run executes (PrefixSampling), ascending.
std::vector<uint64_t> PrefixBlocks(const KernelSpec& spec, const PrefixSampling& prefix);

// Runs the shipped kernels of `g` as RunSampledOnEmulator does, on lazily mapped buffers of
// the full shapes, each launch over a prefix of its blocks (PrefixBlocks). Every access is
// bounds-checked. With an emulator that counts sectors (EmulatorOptions::count_sectors) the
// launches' stats carry the sector efficiency and re-reads of those blocks.
StatusOr<SampledRun> RunPrefixOnEmulator(const Graph& g, const FusionPlan& plan,
                                         const std::vector<CompiledKernel>& kernels,
                                         const PrefixSampling& prefix, Emulator& emulator,
                                         int64_t outer_extent = 0);

// Sector efficiency and re-reads of a compiled graph's shipped kernels, measured on the
// emulator over a prefix of each launch (RunPrefixOnEmulator), for the figures of
// `scripts/bench suite` and the suite's memory checks.
struct SectorTrafficOptions {
  // The L2 share a sector survives in (EmulatorOptions::reuse_window_bytes); for a device,
  // SectorTrafficOptionsFor.
  uint64_t reuse_window_bytes = 0;
  PrefixSampling prefix;
};

// The options for `device`: the cost model's fitted re-use window
// (CostModelParametersFor(device, kCurrentCostModel).reuse_window_bytes: half the H100's
// 50 MiB L2), and a prefix of 1.5 times that many modelled bytes, so that a sector re-used
// after more than the window's traffic is seen re-read (#13's, re-used 2048 rows, about
// 17 MB of modelled traffic, later) while the suite's checks stay within minutes.
SectorTrafficOptions SectorTrafficOptionsFor(const GpuDevice& device);

// Runs `kernels` (`plan` and `kernels` of one CompileGraph for the target) over prefixes of
// their launches on an emulator of its own that counts sectors. A kernel with grid barriers
// runs a prefix of its persistent grid at once (at most prefix.max_grid_barrier_threads
// threads): each phase then moves that share of its traffic, so its re-use window is scaled
// by the same share (blocks run over grid blocks). A later phase that reads what blocks
// left out read in an earlier one counts first touches there, so such a kernel's re-reads
// between phases are seen only when its whole grid runs.
// Errors as RunSampledOnEmulator's.
StatusOr<SampledRun> MeasureSectorTraffic(const Graph& g, const FusionPlan& plan,
                                          const std::vector<CompiledKernel>& kernels,
                                          const SectorTrafficOptions& options,
                                          int64_t outer_extent = 0);

// The figures of one launch, loads and stores together: bytes fetched (32 x the distinct
// sectors of each warp access) per byte the lanes used, and bytes moved to or from DRAM per
// distinct byte. 1 for an ideal kernel; 0 when the launch moved nothing.
double FetchedPerUsed(const LaunchStats& s);
double DramPerDistinct(const LaunchStats& s);

}  // namespace stitch
