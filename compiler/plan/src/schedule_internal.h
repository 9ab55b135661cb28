// What the scheduler's files share (schedule.h is the public interface): grid sizing, each
// kernel's modelled global traffic, and the per-kind schedulers that ScheduleKernel and a
// global kernel's phases call. In each Schedule* function a nonzero `block_threads` fixes
// the block size: the phases of a global kernel share one.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"
#include "stitch/plan/row_stitch.h"

namespace stitch::internal {

// Beyond a few waves a grid-stride loop is as fast and the launch is cheaper.
constexpr int64_t kMaxBlocksPerSm = 32;

// ceil(n / d), clamped to [1, cap]; 1 when d is not positive.
uint32_t CeilDivCapped(int64_t n, int64_t d, int64_t cap);

// The least power of two >= n, at most 2^20.
int NextPow2(int64_t n);

// DRAM moves 32-byte sectors, and buffers start on sector boundaries, so each buffer's
// bytes are rounded up to whole sectors.
int64_t Sectors(int64_t bytes);

// Adds to `found` the kernel inputs whose elements reach node `id` one to one, through
// elementwise ops and reshapes, which keep the linear order of the elements.
void OneToOneInputs(const Graph& g, const KernelSpec& k, int id, std::set<int>& found);

// The transpose of `k` a tile can stage through shared memory, or -1: its only transpose that
// moves the minor-most dimension, with `elements` elements, through which every kernel
// input of that many elements reaches it one to one (an input read in the output's order
// would be strided while the tile is staged). With `alike`, the kernel may hold several such
// transposes, all of one permutation of one shape (a loop writing two outputs transposed the
// same way), each input reaching one of them or a side output (IsTileSideOutput; at least
// one output must not be one); the first is returned.
int StageableTranspose(const Graph& g, const KernelSpec& k, int64_t elements, bool alike = false);

// Sets `k`'s footprint traffic (bytes loaded and stored, loads in flight per thread over an
// iteration space of `elements`, and the inputs read through a strided transpose).
void SetTraffic(const Graph& g, KernelSpec& k, int64_t elements);

// The widest element, in bytes (at least 1), among `k`'s inputs and outputs of `elements`
// elements: the buffers whose accesses a vector of that many consecutive elements widens.
int64_t WidestBufferElement(const Graph& g, const KernelSpec& k, int64_t elements);

// The reduces a reduce kernel (or phase) writes: its reduce outputs, in output order.
std::vector<int> ReduceOutputs(const Graph& g, const KernelSpec& k);

// Bytes of one partial value of each of `reduces` (reduce.h's PartialArrays): its
// accumulator type, at least 4 bytes (f16 and bf16 accumulate in f32).
int64_t PartialBytes(const Graph& g, const std::vector<int>& reduces);

// The planning version's constants of PlanningDevice(d) with that device's fitted issue
// term, which only a measurement gives (the datasheet version has none; devices without a
// fit keep none).
CostModelParameters WithFittedIssueTerm(const GpuDevice& d);

// The planning version's constants of PlanningDevice(d) with the interval at which that
// device's SMs were measured to start blocks (fit-4's term; devices without a measurement
// keep none): what a grid of many short blocks costs beyond its bytes.
CostModelParameters WithMeasuredBlockStarts(const GpuDevice& d);

// Loop kernels (schedule_loop.cc). ScheduleLoop gives `k` blocks of `block_threads` (or a
// size of its own) and the widest vector up to `max_vector_width`; ScheduleStandaloneLoop
// picks the cheapest of a few such mappings, or a transpose tile, for a kernel of its own.
void ScheduleLoop(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0,
                  int max_vector_width = 8);
void ScheduleStandaloneLoop(const Graph& g, KernelSpec& k, const GpuDevice& d);
// Replaces `k`'s mapping with the cheapest of LoopMappingCandidates' by `model` (at a tie,
// the more even busiest SM, never a narrower vector).
void ChooseLoopMapping(const Graph& g, KernelSpec& k, const GpuDevice& d, const CostModel& model);

// The kept columns of a column reduction's tile: 32 lanes of `vector_width` each.
inline int64_t ColumnTileWidth(const ThreadMapping& m) {
  return 32 * static_cast<int64_t>(std::max(m.vector_width, 1));
}

// Reductions (schedule_reduce.cc). SetLoadsPerStep sets how many reduced elements a thread
// loads before combining them: up to 4, as many as it has per row (or chunk), each an
// independent load in flight (a column lane's vector counting as its values). A positive
// `column_lane_bytes` replaces a column lane's cap of 4 values with the steps that keep that
// many bytes in flight (the candidates GlobalStitchMappingCandidates returns).
void ScheduleRowReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0);
void ScheduleColumnReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0);
void SetLoadsPerStep(const Graph& g, KernelSpec& k, int column_lane_bytes = 0);

// Row-stitched kernels (schedule_row_stitch.cc). FillRowStitch fills a mapping with
// `threads_per_row` threads per row and returns false when the kernel has column reduces
// and a thread cannot keep fixed columns in registers; AddColumnPartials prices a phase's
// column reduces on its final grid.
Status ScheduleRowStitch(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0);
bool FillRowStitch(const Graph& g, const RowStitchLayout& layout, int threads_per_row,
                   const GpuDevice& d, int block_threads, KernelSpec& k);
void AddColumnPartials(const Graph& g, KernelSpec& k);

// Global kernels (schedule_global.cc): the phases, their grid and their split reduces.
Status ScheduleGlobalStitch(const Graph& g, KernelSpec& k, const GpuDevice& d);

// Whether a scheduled reduce can split its reduced elements over several blocks (column
// reduces, and row reduces that give a row a whole block), and the most chunks it can split
// them into while each chunk still gives every thread of the block four elements or more (1
// for any other kernel).
bool SplittableReduce(const KernelSpec& k);
int64_t MaxReduceChunks(const Graph& g, const KernelSpec& k);

}  // namespace stitch::internal
