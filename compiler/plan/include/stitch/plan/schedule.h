// The scheduler: gives each kernel of a fusion plan its thread mapping (plan.h) for a GPU.
//
// Row reductions get several rows per warp for short rows, a warp per row, or a block per
// row, with block sizes picked so the grid fills the SMs; column reductions get tiles of
// 32 lanes, each lane one column or, in a global kernel's phase, several adjacent ones; every
// kernel gets the widest vector access its shapes allow. The mapping also
// records the kernel's modelled global traffic, so the cost model and the emulator can be
// compared kernel by kernel.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/plan.h"
#include "stitch/plan/row_stitch.h"

namespace stitch {

// Fills `kernel.mapping` for `device`. Returns INVALID_ARGUMENT when the kernel's shape does
// not suit its kind (a reduce kernel whose hero is not a reduce, say) and RESOURCE_EXHAUSTED
// when no mapping fits the device's limits.
Status ScheduleKernel(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// Shrinks the grid of a scheduled global_stitch kernel to the smallest one that gives every
// phase all the blocks it can use (a splittable reduce: its rows or tiles times its most
// chunks), when the cost model prices that grid no higher than the co-resident one the
// kernel was planned with, so a small graph takes a handful of blocks, not the whole GPU.
// Leaves other kernels, and a kernel whose smaller grid would cost more, as they are.
void SizeGridToWork(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// A column reduction of its own whose column tiles are too few to fill the GPU (a bias
// gradient: 768 columns of 8,192 rows make 6 to 24 tiles) splits each tile's rows into
// chunks over blocks, a block per chunk: each block stores its chunk's partial results in
// the kernel's workspace, and the last block of a tile to arrive combines them and writes
// the tile's outputs (ThreadMapping::SplitCombine::kLastBlock). Unlike a global kernel's
// split, no block waits at a grid barrier, and the grid need not be co-resident. Replaces
// the mapping with the cheapest block size and chunk count by the planning cost model and
// returns true where that is priced below the kernel as scheduled; otherwise, and for other
// kernels, leaves it as it is and returns false.
bool SplitColumnReduceOverBlocks(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// Returns the splits SplitColumnReduceOverBlocks chooses among, for a column reduction
// (none for other kernels): per block size of 256, 512 and 1,024 threads, in that order,
// the chunk count the planning cost model prices lowest, each chunk at least four rows of
// the tile per thread. A kernel already split is split anew from its nodes. gpu_bench
// --mappings times every candidate.
std::vector<KernelSpec> SplitColumnReduceCandidates(const Graph& g, const KernelSpec& kernel,
                                                    const GpuDevice& device);

// A row-stitched kernel in loop mode (its rows outgrow registers) whose kept values fit one
// block's shared memory keeps them there instead (ThreadMapping::dynamic_shared_bytes): a
// block per row stores what its first pass loads, each thread at its own columns, and the
// later passes read it back from there, so the row crosses DRAM once (suite row #12: 8,192
// softmax rows of 201 KB, re-read by its output pass). Takes the threads per row the planning
// cost model prices lowest among those that fit. Leaves other kernels, and kernels whose
// values do not fit, as they are.
void KeepLoopRowsInSharedMemory(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// A row-stitched kernel in loop mode (its rows outgrow registers) reads each row once per
// pass, and the later passes hit L2 only while the rows in flight fit the device's fitted
// reuse window. Caps the grid of such a kernel to the rows that fit, each block looping over
// its rows with the largest block that runs, when the fitted cost model prices that below
// the kernel as scheduled (suite row #12: 8,192 rows of 201 KB read three times each).
// Leaves other kernels, and devices without a fitted window, as they are.
void FitLoopRowsInL2(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// A row-stitched kernel whose rows are read through a transpose across its operand's
// minor-most dimension (each row a column of the operand) fetches a 32-byte sector per
// element when its threads walk the rows one by one. Maps such a kernel to row tiles
// (ThreadMapping::transpose_tile, RowTileStaging): a block takes rows that are adjacent in
// the operand, stages them through shared memory and keeps them in registers, so the
// operand is read once and in whole sectors. The cheapest tile by the fitted cost model
// (the planning version takes the strided reads' re-reads for L2 hits) replaces the mapping
// where it is priced below it (suite row #13: a softmax over the columns of a transposed
// [2048, 24576] bf16 operand). Leaves other kernels as they are.
void TileTransposedRows(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// Maps a row-stitched kernel to row tiles of `rows_per_block` rows of `threads_per_row`
// threads (a multiple of 32) each, whatever the price: the tiles TileTransposedRows chooses
// among, held in registers, or, with `resident`, the resident tiles the mapping sweep times
// (held whole in the shared-memory tile, ThreadMapping::transpose_tile). Returns false,
// leaving the kernel as it was, where it has no transpose to stage (one that moves the
// minor-most dimension, whose output is the row space with the rows along its last dimension,
// and through which every row-space input reaches the rows) or the tile does not fit:
// rows_per_block must divide the transpose's p run, the rows split evenly over their threads,
// and the block fit `device`.
bool MapRowTiles(const Graph& g, KernelSpec& kernel, const GpuDevice& device, int rows_per_block,
                 int threads_per_row, bool resident = false);

// Returns the mappings ScheduleKernel chooses a loop kernel's among, each scheduled for
// `device` from `kernel`'s nodes (its own mapping is not read): first the default, blocks of
// 256 threads at the widest vector (up to 8 elements) on a grid capped at a few waves, then
// one pass per block for 128 threads at 8, 4 and 2 elements and 256 threads at 8 and 4,
// where the grid fits a launch. A width the shapes do not allow comes out narrower, so two
// candidates may coincide. ScheduleKernel picks the cheapest by the planning cost model and
// may then stage a transpose through tiles; gpu_bench --mappings times every candidate, the
// measurements that choice is calibrated on.
std::vector<KernelSpec> LoopMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                              const GpuDevice& device);

// Returns the mappings gpu_bench --mappings times for a loop kernel that ScheduleKernel
// stages through shared memory tiles (ThreadMapping::transpose_tile; none for other kernels):
// the tile at blocks of 64, 128, 256 (as scheduled) and 512 threads, a thread taking as many
// vectors of each tile as the block leaves it, where the block covers a tile in whole rows of
// vectors. The model prices one tile a block alike at every size; suite row #24, one tile for
// each of 196 blocks, ran at 0.70x torch.compile on the H200 with 256 threads of one vector
// each, so these measure whether fewer threads with more loads each shorten such a kernel.
// Then tiles of two and four times kTransposeTileElements at 256 threads, which the
// scheduler chooses among by the fitted issue term (more loads a thread, a tile's own
// instructions spread over more elements).
std::vector<KernelSpec> TransposeTileMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                       const GpuDevice& device);

// Returns the mappings gpu_bench --mappings times for a loop kernel whose threads keep to
// their columns (ThreadMapping::column_period; none for other kernels): the same grid with two
// vectors a step, a grid's stride apart on the same columns, where every thread still takes at
// least two steps. The second vector doubles the loads a thread keeps in flight for its
// elements' registers alone, where the columns' values have cut occupancy (suite row #19: 55
// registers, eight blocks of 128 threads an SM, 118.7 µs of the H200 model's memory term
// against 98.8 for the plain loop's); KeepLoopColumnsPerThread prices it, and the planning
// model, whose issue term gives the fewer resident warps no credit for a step's two
// independent vectors, does not choose it, so a GPU run decides.
std::vector<KernelSpec> KeptColumnsMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                     const GpuDevice& device);

// Returns the mappings ScheduleKernel chooses a row-stitched kernel's among, for a kernel of
// its own (one with column reduces runs only as a global kernel's phase: none), each filled
// for `device` from `kernel`'s nodes: one per count of threads per row that fits, from a
// share of a warp to whole blocks of up to 1,024 threads, in the order tried, each followed
// by the same mapping with its rows staged in spans where StageRowSpans stages it. Then, for rows
// that outgrow registers, the mappings KeepLoopRowsInSharedMemory chooses among, at 1, 2 and 4
// vectors a thread in flight (ThreadMapping::loads_per_step; it ships 4). Then, for rows read
// through a transpose, the resident row tiles TileTransposedRows chooses among, of 4, 8 and 16
// rows of 32, 64 and 128 threads each. What ScheduleKernel may do after choosing (the grid
// capped to the L2 window, tiles held in registers) is not among them.
// gpu_bench --mappings times every candidate.
std::vector<KernelSpec> RowStitchMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                   const GpuDevice& device);

// Returns the mappings gpu_bench --mappings times for a global kernel beside its own, for
// one with a column-reduce phase (none for others): the kernel as scheduled, with each
// column lane keeping 16 bytes of loads in flight (SetLoadsPerStep's steps, up to 4), at the
// occupancy the scheduler counts on and at half of it (twice the registers per thread, so
// half the co-resident blocks, each split phase's chunks dealt over them), and 32 bytes at
// half. ScheduleKernel does not choose among them: at the fitted DRAM latency the cost
// model's Little's-law term does not bind for such grids, so they measure whether a lane's
// bytes in flight set a column phase's speed (suite rows #18 and #20 differ in little else).
// Where no block fits, a candidate is left out. For one whose row-reduce phases load vectors,
// also the kernel with those phases loading single elements, as they did before (suite row
// #17's batch statistics), to time what the vectors gain; for one with row-stitch phases of
// warps holding their rows in registers, the kernel with those phases prefetching their next
// rows into L2 (ThreadMapping::prefetch_next_rows; suite rows #6 and #15), which no planner
// chooses until a GPU has timed it.
std::vector<KernelSpec> GlobalStitchMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                      const GpuDevice& device);

// A loop kernel of its own (not staged through transpose tiles, not keeping columns per
// thread) takes, among LoopMappingCandidates', the cheapest by the planning cost model with
// the interval at which the device's SMs were measured to start blocks (fit-4's term; a
// device without a measurement prices as the planning model does). An SM starts a block only
// about every 80-90 ns, so a grid of hundreds of thousands of short blocks takes that long
// whatever bytes it moves: the H200's mapping sweep timed suite row #18's normalize loop at
// 245.2 us as 401,408 blocks of 2-element vectors, 183.5 as 200,704 of 4 and 195.5 as
// 100,352 of 8, which the planning model priced within 1%. The planners merge kernels on the
// planning model alone (with this term, #18's two kernels would merge into one that spills,
// which the sweep timed at 756.7 us), so this re-chooses a loop's mapping once its plan is
// made. fit-4's other term, the bandwidth of a last partial wave, is left out: with it, #19's
// loop would drop its per-thread columns for a grid the sweep timed 12% slower. Leaves other
// kernels as they are.
void RemapLoopForBlockStarts(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// A loop kernel whose elements read per-column values (a broadcast along the output's
// leading dimensions: a batch norm's per-channel statistics and what is computed from them)
// recomputes them for every element unless each thread keeps to the same columns on every
// pass. Sets ThreadMapping::column_period and caps the grid to a multiple that makes the
// grid's stride a multiple of the period: of the grids of one, two and four waves that give
// every thread at least two passes, with one or two vectors a step (loads_per_step: the
// second a grid's stride on, on the same columns, in flight with the first), the cheapest,
// where the planning cost model with the fitted issue term prices it below the kernel as
// scheduled (what it saves is instructions, estimated per element; what it costs is the
// values' registers, and a second vector's). Leaves other kernels, and kernels without such
// a grid, as they are.
void KeepLoopColumnsPerThread(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// Returns the linear indices, ascending and distinct, of the blocks of a scheduled kernel
// that sit at the boundaries of its grid-stride loops: for every loop the kernel runs (each
// phase of a global_stitch kernel, a split reduce's combine stage, a row-stitched kernel's
// independent outputs and column combine), the block that holds the loop's last work item
// and the block after it, the first to take one pass fewer. Their index arithmetic is where
// a grid that does not divide the work shows an off-by-one; the emulator's sampled runs
// include them (emulated_run.h). For a column reduction whose last block per tile combines
// the partials, also every block holding a chunk of the last tile, so that a sampled run
// reaches that tile's combine.
std::vector<uint64_t> BoundaryBlocks(const Graph& g, const KernelSpec& kernel);

// Returns the elements, rows or tiles (the unit of ThreadMapping::work_items) one block of
// a `kind` kernel with mapping `m` covers per pass of its grid-stride loop: a vector per
// thread (loop kernels), rows_per_block rows (row kernels), one tile of 32 x vector_width
// columns (column reductions); 1 for a global_stitch kernel, whose phases are their own
// kernels.
int64_t ItemsPerPass(KernelKind kind, const ThreadMapping& m);

// The tiles of a transpose tile (ThreadMapping::transpose_tile) over node `transpose`'s
// output. A tile spans q_side elements of the output's minor-most dimension (q_dim) and
// p_side elements of the p run: the output dimensions whose operand dimensions come after
// the one q_dim reads (p_dims, in operand order), which row-major in that order are one
// contiguous run of the operand. So a tile reads q_side runs of p_side consecutive operand
// elements and writes p_side runs of q_side consecutive output elements. p_side x q_side =
// `tile_elements` (kTransposeTileElements unless a loop kernel's mapping takes larger tiles:
// LoopTransposeTilesOf); p_side is 32, or 16 or 8 for a shorter run. tiles_p and tiles_q
// tiles cover the run and q_dim, and the other dimensions repeat them `batch` times.
struct TransposeTiles {
  std::vector<int> p_dims;
  int q_dim = 0;
  int64_t p = 0;  // elements of the p run
  int64_t q = 0;  // elements of q_dim
  int64_t p_side = 0;
  int64_t q_side = 0;
  int64_t tiles_p = 0;
  int64_t tiles_q = 0;
  int64_t batch = 0;
  int64_t count() const { return tiles_p * tiles_q * batch; }
};
TransposeTiles TransposeTilesOf(const Graph& g, int transpose,
                                int64_t tile_elements = kTransposeTileElements);

// The tiles of loop kernel mapping `m`'s transpose tile: each of its threads loads
// loads_per_step vectors of vector_width elements of a tile, so a tile has block threads x
// vector_width x loads_per_step elements.
TransposeTiles LoopTransposeTilesOf(const Graph& g, const ThreadMapping& m);

// The elements of loop kernel mapping `m`'s transpose tile: block threads x vector_width x
// loads_per_step (LoopTransposeTilesOf's tile).
int64_t LoopTransposeTileElements(const ThreadMapping& m);

// Whether a block of `threads` threads, each loading and storing vectors of `width`
// elements, covers tiles of `tiles` in whole rows of vectors both ways: along the p run
// (where it computes the tile) and along q_dim (where it stores it), every thread with as
// many vectors as the others. The transpose tile emitter's condition, which the scheduler
// keeps.
bool TransposeTileFits(const TransposeTiles& tiles, int64_t threads, int64_t width);

// Whether `output` of loop kernel `k`, whose mapping stages a transpose tile, is a side
// output: computed from the kernel's inputs without any transpose that moves a minor-most
// dimension, so the tile writes it as it computes the transposed operand's elements, at the
// same linear indices of its own, rather than through shared memory.
bool IsTileSideOutput(const Graph& g, const KernelSpec& k, int output);

// How a row-stitched kernel with a transpose tile brings its rows into registers. A block
// takes rows_per_block rows that are consecutive along the transpose's p run (a row tile;
// the transpose's output is the row space, its minor-most dimension along the rows) and
// stages them in `rounds` rounds of `round` = threads_per_row x vector_width elements of
// each row, the elements each thread keeps of one vector position. A round is computed
// with each thread taking `p_width` rows at one element (4, 2 or 1: at most vector_width,
// dividing rows_per_block and the operand's minor-most dimension), so the operand is read
// along its minor-most run, into a shared-memory tile of rows_per_block rows of `row_stride`
// compute-type values; then each thread reads its own vector of its own row back. A resident
// tile (ThreadMapping::dynamic_shared_bytes) is one round of whole rows, which every pass
// reads from the tile.
struct RowTileStaging {
  int64_t p_width = 1;
  int64_t round = 0;
  // round, padded so that the rows a warp computes side by side fall in different banks
  // and each row stays 16-byte aligned.
  int64_t row_stride = 0;
  int64_t rounds = 0;
  int64_t p_lanes = 0;  // threads per element of a round: rows_per_block / p_width
};
// Returns the staging of mapping `m` of a kernel of `g`; all zero but p_width when `m` has no
// transpose tile.
RowTileStaging RowTileStagingOf(const Graph& g, const ThreadMapping& m);

// How a row-stitched kernel with staged row spans (ThreadMapping::staged_row_spans) moves its
// rows. Per pass a block takes `rows` consecutive rows, `span` = rows x row length elements of
// each staged buffer, contiguous there; it copies each staged input's span into shared memory
// in 16-byte vectors and each staged output's span out of it, its threads reading and writing
// their elements in between, the spans in the buffers' own dtypes, `shared_bytes` in all.
// Staged are
// the kernel's f32, f16 and bf16 inputs and outputs with one element per row element, whose
// span and whole buffer are whole 16-byte vectors. All zero where the kernel cannot stage its
// rows: not a row-stitched kernel of a warp or a share of one per row, rows in registers, no
// row tile and no column reduces; no staged input; or its accesses already 16 bytes wide.
struct RowSpanStaging {
  int64_t rows = 0;
  int64_t span = 0;
  std::vector<int> inputs;
  std::vector<int> outputs;
  int64_t shared_bytes = 0;
};
RowSpanStaging RowSpanStagingOf(const Graph& g, const KernelSpec& kernel,
                                const RowStitchLayout& layout);

// Stages the rows of a row-stitched kernel in spans (RowSpanStagingOf) where it can and where
// that keeps its blocks per SM; returns whether it did. Its accesses to the staged buffers
// become 16-byte vectors where the rows' own accesses are narrower (suite row #14: rows of 197
// f16, 2-byte accesses whose half-warps straddle two sectors), for two block barriers per pass
// and the spans' shared memory. No planner stages rows yet: the cost model
// has no term for what narrow accesses cost beyond their bytes, so gpu_bench --mappings times
// the staged mapping beside the plain one (RowStitchMappingCandidates) first.
bool StageRowSpans(const Graph& g, KernelSpec& kernel, const GpuDevice& device);

// Schedules every kernel of `plan`.
Status SchedulePlan(const Graph& g, FusionPlan& plan, const GpuDevice& device);

}  // namespace stitch
