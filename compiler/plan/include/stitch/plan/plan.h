// Fusion plans: which nodes of a graph run in which kernel, how the values inside a kernel
// are passed between its parts (the stitch scheme), and how its threads cover the work
// (the thread mapping).
//
// A plan is produced by a planner (baseline_planner.h, stitch_planner.h), given thread
// mappings by the scheduler (schedule.h), priced by a cost model (cost_model.h) and
// consumed by codegen. Buffers: every graph parameter is an input buffer; every node in
// some kernel's `outputs` is materialised in global memory (a graph output or a temporary).
//
// Thread-safety: plain values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "stitch/ir/graph.h"

namespace stitch {

// The widest access a kernel makes to a buffer, in bytes: kernel buffers are aligned to it
// (codegen.h), so a thread's adjacent elements may load and store as one 128-bit vector.
inline constexpr int kMaxVectorBytes = 16;
// Elements of a transpose tile (ThreadMapping::transpose_tile): 32 x 32, or 16 x 64 and
// 8 x 128 where the transposed operand's minor-most dimension is short.
inline constexpr int kTransposeTileElements = 1024;

// The partials of a split reduction (ThreadMapping::reduce_chunks) that a lane of a combining
// warp loads before it combines any of them: a lane takes every 32nd chunk, up to four at a
// time. Partials come back from L2, so each batch costs one round trip.
inline int64_t CombineLoadsInFlight(int64_t chunks) {
  const int64_t per_lane = (chunks + 31) / 32;
  return per_lane < 1 ? 1 : per_lane > 4 ? 4 : per_lane;
}

// The round trips to L2 a lane of a combining warp waits for: one per batch of
// CombineLoadsInFlight partials.
inline int64_t CombineRoundTrips(int64_t chunks) {
  const int64_t per_lane = (chunks + 31) / 32;
  const int64_t batch = CombineLoadsInFlight(chunks);
  return (per_lane + batch - 1) / batch;
}

// The round trips the last block of a column tile waits for when it combines the tile's
// partials (ThreadMapping::SplitCombine::kLastBlock): its arrival's atomic, then one per
// chunk each of the tile's `tile_rows` rows of threads loads.
inline int64_t LastBlockCombineRoundTrips(int64_t chunks, int64_t tile_rows) {
  const int64_t rows = tile_rows < 1 ? 1 : tile_rows;
  return 1 + (chunks + rows - 1) / rows;
}

struct LaunchDims {
  std::array<uint32_t, 3> grid = {1, 1, 1};
  std::array<uint32_t, 3> block = {1, 1, 1};
  uint64_t blocks() const { return uint64_t{grid[0]} * grid[1] * grid[2]; }
  uint64_t block_threads() const { return uint64_t{block[0]} * block[1] * block[2]; }
  uint64_t threads() const { return blocks() * block_threads(); }
  bool operator==(const LaunchDims&) const = default;
};

// The shape of the loop nest a kernel runs; codegen has one emitter per kind.
enum class KernelKind {
  kLoop,          // one thread per output element, grid-stride; all outputs share a shape
  kRowReduce,     // the hero reduce's minor-most input dimension is reduced
  kColumnReduce,  // the hero reduce keeps the minor-most input dimension
  // Row reductions stitched with their producers and consumers: a group of threads owns
  // whole rows, computes the reduces of a row one after another (each result reaches the
  // row's threads through a warp shuffle or shared memory) and then every output element of
  // the row. Values read by several of the row's phases stay in registers.
  kRowStitch,
  // A persistent grid that runs `phases` (kernels of the kinds above) one after another,
  // with a grid-wide barrier between consecutive phases (AStitch's global scheme): values
  // cross phases through global memory, and every block of the grid is co-resident. Its
  // reduce phases may split their reduced elements over blocks (reduce_chunks).
  kGlobalStitch,
};

std::string_view KernelKindName(KernelKind k);  // "loop", "row_reduce", ...

// How a value crosses an edge between two parts of a stitched kernel (AStitch's schemes).
enum class StitchScheme {
  kIndependent,  // no reuse: unrelated parts share a launch (horizontal fusion)
  kLocal,        // registers: the thread that produces the value consumes it
  kRegional,     // shared memory (or a warp shuffle) inside a block, behind a block barrier
  kGlobal,       // global memory behind a grid-wide barrier
};

std::string_view StitchSchemeName(StitchScheme s);  // "independent", "local", ...

// A producer -> consumer edge inside a kernel whose value is passed by `scheme` rather than
// recomputed where it is used.
struct StitchEdge {
  int producer = -1;
  int consumer = -1;
  StitchScheme scheme = StitchScheme::kLocal;
  bool operator==(const StitchEdge&) const = default;
};

// How a kernel's threads cover its work. The scheduler fills it from the kernel's shapes and
// the target GPU; codegen follows it; the cost model prices it.
struct ThreadMapping {
  LaunchDims launch;
  // Row kernels (kRowReduce, kRowStitch): threads that share one row. Below 32, a warp
  // holds 32 / threads_per_row rows; 32 or more (a multiple of 32) is a block of warps per
  // row.
  int threads_per_row = 32;
  int rows_per_block = 1;
  // Column reductions: blockDim.y, the threads that split one column's reduced elements.
  int column_tile_y = 8;
  // Split reductions: the reduced elements of every output are split into this many chunks,
  // each reduced by one block (or block tile) into a partial result in the kernel's
  // workspace, which `split_combine` says how the chunks' partials are combined.
  int reduce_chunks = 1;
  enum class SplitCombine {
    // Reduce phases of a kGlobalStitch kernel: after a grid barrier, a warp per output
    // combines its partials (later phases read the outputs behind that barrier anyway).
    kGridBarrier,
    // kColumnReduce kernels of their own: a block that has stored its chunk's partials of a
    // column tile counts itself in on the tile's counter in the workspace, and the block
    // that arrives last combines the tile's partials and writes its outputs. No block waits
    // for another, so the grid need not be co-resident: it launches without a cooperative
    // launch, at as many blocks as the work has.
    kLastBlock,
  };
  SplitCombine split_combine = SplitCombine::kGridBarrier;
  // kLoop and kRowStitch: consecutive elements each thread handles at once (1, 2, 4 or 8),
  // so that its accesses to full-size (row-space) buffers become vectors of up to
  // kMaxVectorBytes. kColumnReduce: adjacent kept columns each lane reduces, for the same
  // reason; a tile then spans 32 x vector_width columns. kRowReduce: consecutive reduced
  // elements each thread loads at once, adjacent in the input's minor-most dimension.
  int vector_width = 1;
  // kLoop: the transpose node whose read is staged through shared memory, or -1. Its operand's
  // minor-most dimension is not its output's, so threads walking the output in order would
  // read the operand a sector per element; instead a block takes tiles of the transpose's
  // output (over a run of the operand's trailing dimensions and the output's minor-most
  // dimension: TransposeTiles; loads_per_step vectors a thread), computes a
  // tile with its lanes along the operand's run and stores it with its lanes along the
  // output's minor dimension, through shared memory, vector_width elements per lane and
  // access both ways. work_items then counts tiles.
  // kRowStitch: the transpose through which the rows are read across its operand's
  // minor-most dimension, staged a row tile at a time (schedule.h, RowTileStaging): a block
  // takes rows_per_block rows adjacent in the operand, threads_per_row threads each, and
  // every row stays in registers (values_per_thread), or, with dynamic_shared_bytes > 0, in
  // the shared-memory tile itself (a resident row tile: every pass reads the transpose's
  // values from the tile and computes the rest again, so a thread keeps no value of the row
  // in registers).
  int transpose_tile = -1;
  // kLoop: 0, or the elements of the output's trailing dimensions over which every
  // broadcast of per-column values (a batch norm's per-channel statistics, a bias) repeats.
  // The grid's stride is then a multiple of it, so each thread keeps to the same columns on
  // every pass of its grid-stride loop and loads and computes their values once, not once per
  // element. The kernel traps when launched on a grid whose stride is not such a multiple.
  int64_t column_period = 0;
  // kRowReduce and kColumnReduce: reduced elements each thread loads before combining them
  // (strided as its loop steps, so accesses stay coalesced), for loads in flight.
  // kRowStitch with its row in shared memory (dynamic_shared_bytes > 0): the vectors each
  // thread loads at once where a pass first reads its row, so that the loads in flight do
  // not take a register per element of the thread's share of the row; with a resident row
  // tile, the loads each thread issues at once while it stages the tile.
  // kLoop with a transpose_tile: the vectors each thread loads of a tile, all issued before
  // the tile's math (LoopTransposeTilesOf: a tile has block threads x vector_width x
  // loads_per_step elements). kLoop without one: the vectors each thread takes a step of its
  // grid-stride loop, a grid's stride apart (with a column_period, on the same columns), all
  // loaded before their math.
  int loads_per_step = 1;
  // kRowStitch: elements of a row each thread keeps in registers between the row's phases
  // (0 when rows are too long, and later phases read global memory again).
  int values_per_thread = 0;
  // kRowStitch: every rescaled sum (row_stitch.h: a sum of exp(x - max(x))) runs in its max's
  // pass instead of a pass of its own. Set for rows in loop mode, which then read their row
  // once less; rows held in registers re-read nothing and keep the plain passes.
  bool rescaled_sums_in_one_pass = false;
  // kRowStitch, a warp or a share of one per row, rows in registers: a block's rows are
  // consecutive, so the span they take of each row-space buffer is contiguous; the block
  // copies its inputs' spans into shared memory and its outputs' spans out of it in
  // 16-byte vectors, and its threads read and write their elements there (RowSpanStagingOf,
  // schedule.h). For rows whose own accesses are narrower than 16 bytes (suite row #14's
  // rows of 197 f16: one element a lane).
  bool staged_row_spans = false;
  // kRowStitch, a warp or a share of one per row, rows in registers, whose warps each walk
  // several rows (a global kernel's phase: a co-resident grid of one block per SM for suite
  // rows #6 and #15, each warp waiting on its row's loads before its reductions and stores):
  // once a row's first pass has issued its loads, each thread asks for its share of its next
  // row's row-space inputs in L2 (prefetch.global.L2), so that row's loads wait on L2 rather
  // than DRAM while this row computes.
  bool prefetch_next_rows = false;
  uint32_t shared_bytes = 0;  // static shared memory per block
  // kRowStitch with a block per row and values_per_thread > 0: the bytes of dynamic shared
  // memory that hold the values the row keeps between its passes (SharedRowRegionsOf,
  // row_stitch.h), where registers would not hold them; 0 keeps them in registers. Each
  // thread reads back only the slots it wrote, so the slots need no barrier. With a
  // transpose_tile, the bytes of the resident row tile (RowTileStaging), read by every
  // thread of its row after the barrier that ends the staging.
  uint32_t dynamic_shared_bytes = 0;
  // kRowStitch: whether the rows are a resident row tile's (transpose_tile), held whole in
  // dynamic shared memory rather than in registers.
  bool resident_row_tile() const { return transpose_tile >= 0 && dynamic_shared_bytes > 0; }
  // kRowStitch: whether a warp or a share of one takes each row, each thread holding its
  // share in registers (no row tile, nothing kept in dynamic shared memory).
  bool warp_rows_in_registers() const {
    return threads_per_row <= 32 && values_per_thread > 0 && transpose_tile < 0 &&
           dynamic_shared_bytes == 0;
  }
  // Block-wide barriers each block passes per row or tile it processes.
  int block_barriers_per_item = 0;
  int grid_barriers = 0;  // grid-wide barriers per launch
  // Estimated registers per thread, for the occupancy bound.
  int registers_per_thread = 32;
  // Units of work the grid strides over: rows (row kernels), 32-column tiles (column
  // reductions) or elements (loop kernels).
  int64_t work_items = 0;
  // Bytes of global loads one thread has in flight at once (independent loads of one
  // iteration times their width): with resident threads it bounds achieved bandwidth.
  int load_bytes_in_flight_per_thread = 4;
  // Global-memory traffic of one launch at full shapes, each buffer counted once.
  int64_t bytes_loaded = 0;
  int64_t bytes_stored = 0;
  // Bytes one work item (a row) reads again after a first pass over it: row kernels in loop
  // mode re-read their row-space inputs in every later pass. Whether the re-read hits L2
  // depends on how many items are in flight across the device, which the cost model knows.
  int64_t reread_bytes_per_item = 0;
  // The distinct bytes of an item those re-reads touch (a row of each re-read input): what
  // each item in flight holds in L2 until its last pass, against the reuse window.
  int64_t reread_footprint_bytes_per_item = 0;
  // Inputs read along a dimension other than their minor-most one (through a transpose): a
  // warp's adjacent elements fall in different 32-byte sectors. `strided_input_bytes` is
  // their share of `bytes_loaded`; `strided_sector_bytes` what they fetch when no sector
  // serves more than one element (a sector per element); `strided_reuse_bytes` the bytes of
  // other sectors fetched before a sector's next element is used, which decides whether the
  // rest of the sector is still in L2 by then.
  int64_t strided_input_bytes = 0;
  int64_t strided_sector_bytes = 0;
  int64_t strided_reuse_bytes = 0;
  // What the assembler reported for the kernel's cubin (0: not assembled yet). Filled after
  // code generation so that the cost model reads occupancy from the compiled code rather
  // than from registers_per_thread, the scheduler's estimate.
  int assembled_registers = 0;
  // The machine instructions of the kernel's cubin, out-of-line subroutines excluded
  // (0: not assembled yet): what a warp issues per pass of the grid-stride loop, for the
  // cost model's instruction-issue bound. It counts each inner loop's body once.
  int assembled_instructions = 0;
  // The scheduler's estimate of assembled_instructions, for comparing mappings of one kernel
  // before any is assembled (0 elsewhere: a shipped plan's prices read the cubin's count or
  // none, as the baselines' do).
  int estimated_instructions = 0;

  bool operator==(const ThreadMapping&) const = default;
};

struct KernelSpec {
  std::string name;  // a valid PTX identifier, unique within the plan
  KernelKind kind = KernelKind::kLoop;
  // For reduce kernels: the reduce node the loop nest is built around. For kRowStitch: the
  // first of the kernel's reduces; every reduce of the kernel shares its row geometry.
  int hero = -1;
  // Nodes evaluated inside this kernel, in topological order. Values flow between them in
  // registers; nodes read from global memory are in `inputs` instead.
  std::vector<int> nodes;
  // Materialised nodes this kernel reads: graph parameters, or outputs of earlier kernels.
  std::vector<int> inputs;
  // Nodes this kernel writes to global memory. For kLoop they all have the same number of
  // elements; for reduce kernels they are the hero (and possibly other reduces of the same
  // shape over the same dimensions) and nodes with the reduce's element count; kRowStitch
  // outputs have either a row's or the whole input's element count.
  std::vector<int> outputs;
  // The edges whose values are reused rather than recomputed, and how.
  std::vector<StitchEdge> edges;
  ThreadMapping mapping;
  // kGlobalStitch: the phases in execution order. Each is a kernel of another kind whose
  // logical block (mapping.launch.block) has as many threads as this kernel's block and
  // whose grid is this kernel's grid. The parent's `nodes` are the phases' nodes, its
  // `inputs` the buffers no phase writes, and its `outputs` every phase's outputs (values
  // passed between phases are temporaries in global memory).
  std::vector<KernelSpec> phases;

  bool operator==(const KernelSpec&) const = default;
};

// Whether `a` and `b` emit the same code for the same graph: equal but for their names (and
// their phases'), their edges, and what the assembler reported and the scheduler estimated of
// their instructions and registers after choosing. Two planners' kernels that are the same
// code run alike, so the assembler's figures of one price the other.
bool SameCode(const KernelSpec& a, const KernelSpec& b);

struct FusionPlan {
  std::string planner;              // "baseline" or "stitch"
  std::vector<KernelSpec> kernels;  // in an order that respects data dependences
};

// Returns a multi-line description: one line per kernel with its kind, hero, nodes,
// mapping and stitched edges.
std::string Describe(const Graph& g, const FusionPlan& plan);

}  // namespace stitch
