// Row and column reductions that are kernels (or phases) of their own.
#include <algorithm>
#include <memory>
#include <optional>

#include "int_math.h"
#include "schedule_internal.h"
#include "stitch/plan/op_classes.h"

namespace stitch::internal {
namespace {

// The reduced elements of each output of a reduction kernel, and the threads that share one
// output's elements (a row's threads, or a column tile's height).
struct ReduceSpan {
  int64_t reduced = 0;
  int64_t threads = 1;
};

ReduceSpan SpanOf(const Graph& g, const KernelSpec& k) {
  const Node& h = g.nodes[k.hero];
  const int64_t outputs = h.shape.elements();
  const int64_t reduced = outputs > 0 ? g.nodes[h.operands[0]].shape.elements() / outputs : 0;
  const ThreadMapping& m = k.mapping;
  return {reduced, k.kind == KernelKind::kColumnReduce ? m.column_tile_y : m.threads_per_row};
}

// The reduces a reduce kernel computes: its hero, and the reduces among its outputs. The
// column emitter keeps a tile of partials of each in shared memory.
std::vector<int> ComputedReduces(const Graph& g, const KernelSpec& k) {
  std::vector<int> reduces = ReduceOutputs(g, k);
  if (std::find(reduces.begin(), reduces.end(), k.hero) == reduces.end()) {
    reduces.push_back(k.hero);
  }
  return reduces;
}

// Static shared memory a block may declare; the emitters' arrays are static.
constexpr int64_t kMaxStaticSharedBytes = 48 * 1024;
// Accumulators a column lane keeps: the phases of a global kernel of 1,024-thread blocks run
// in 32 registers, which eight accumulators beside a step's loads still leave room in.
constexpr int64_t kMaxColumnAccumulators = 8;

// The adjacent kept columns (8, 4, 2 or 1) each lane of a column reduction takes, the most
// for which:
// - the count divides the input's minor-most dimension, so a lane's columns are adjacent;
// - that many elements of every full-size input fit one kMaxVectorBytes access;
// - the 32 lanes' columns do not outnumber the kept ones (lanes past them would idle);
// - the tile's partials, `partial_bytes` per column and row of the tile, fit static shared
//   memory, and a lane's accumulators, one per reduce and column, kMaxColumnAccumulators;
// - the work items (tiles times the chunks their rows can split into) still number as many
//   as single columns give, or two per SM.
// Where 32 columns make half a row of the input (suite row #18: 64 f16 channels), two per lane
// make a warp's load one whole row.
int ColumnVectorWidth(const Graph& g, const KernelSpec& k, const GpuDevice& d,
                      int64_t partial_bytes, int64_t reduces) {
  const Node& input = g.nodes[g.nodes[k.hero].operands[0]];
  const int64_t kept = g.nodes[k.hero].shape.elements();
  const int64_t reduced = kept > 0 ? input.shape.elements() / kept : 0;
  const int64_t minor = input.shape.rank() > 0 ? input.shape.dims.back() : 1;
  const int64_t widest = WidestBufferElement(g, k, input.shape.elements());
  const int tile_y = k.mapping.column_tile_y;
  const int64_t chunks = std::max<int64_t>(1, reduced / (int64_t{tile_y} * 4));
  const int64_t items_needed = std::min(CeilDiv(kept, 32) * chunks, int64_t{d.sms} * 2);
  for (int v = 8; v > 1; v /= 2) {
    const int64_t tile_bytes = partial_bytes * 32 * v * tile_y;
    if (minor % v == 0 && v * widest <= kMaxVectorBytes && 32 * v <= kept &&
        tile_bytes <= kMaxStaticSharedBytes && v * reduces <= kMaxColumnAccumulators &&
        CeilDiv(kept, 32 * v) * chunks >= items_needed) {
      return v;
    }
  }
  return 1;
}

// The registers a thread of a column reduction takes with lanes of `width` columns: 32, or,
// for a lane of four columns or more whose math computes a heavy op (erf, exp, a division),
// four more a column: the emitter then loads every column's operands before any column's math
// and stores the side outputs after it (codegen's LoadColumnsFirst), so each column's values
// stay live across the lane. Suite row #11's GELU gradient, 8 f16 columns a lane, assembles to
// 48-64 registers; lanes of 2 columns of an exp (e2e_column_lanes_test) to 31.
int ColumnLaneRegisters(const Graph& g, const KernelSpec& k, int width) {
  constexpr int kBase = 32;
  if (width < 4) return kBase;
  const bool heavy =
      std::any_of(k.nodes.begin(), k.nodes.end(), [&](int id) { return IsHeavy(g.nodes[id].op); });
  return heavy ? kBase + 4 * width : kBase;
}

// The consecutive reduced elements (8, 4, 2 or 1) a thread of a row reduction loads as one
// vector, the most for which:
// - the hero's input has two dimensions or more and its minor-most one is reduced and divisible
//   by the count, so a vector's elements are adjacent in every full-size buffer (the
//   outermost dimension, which a shape class varies, is never the minor-most);
// - that many elements of every full-size buffer fit one kMaxVectorBytes access;
// - every thread of a row gets a vector.
// Scalar loads of #17's f16 batch statistics (a phase of 1,024-thread blocks) took 22
// instructions an element, most of them the division of the element's index into its
// image and pixel; a vector divides once for all of its elements.
int RowReduceVectorWidth(const Graph& g, const KernelSpec& k, int64_t row_len) {
  const Node& h = g.nodes[k.hero];
  const Shape& input = g.nodes[h.operands[0]].shape;
  const int rank = input.rank();
  if (rank < 2 || std::find(h.dimensions.begin(), h.dimensions.end(), int64_t{rank - 1}) ==
                      h.dimensions.end()) {
    return 1;
  }
  const int64_t widest = WidestBufferElement(g, k, input.elements());
  for (int v = 8; v > 1; v /= 2) {
    if (input.dims.back() % v == 0 && v * widest <= kMaxVectorBytes &&
        row_len >= int64_t{k.mapping.threads_per_row} * v) {
      return v;
    }
  }
  return 1;
}

}  // namespace

void SetLoadsPerStep(const Graph& g, KernelSpec& k, int column_lane_bytes) {
  ThreadMapping& m = k.mapping;
  const ReduceSpan span = SpanOf(g, k);
  const int64_t chunk = CeilDiv(span.reduced, std::max(m.reduce_chunks, 1));
  // A row's thread takes vectors of vector_width elements; a column lane's width is columns.
  const int64_t along_row = k.kind == KernelKind::kRowReduce ? std::max(m.vector_width, 1) : 1;
  const int64_t per_thread = CeilDiv(chunk, std::max<int64_t>(span.threads, 1) * along_row);
  int loads = per_thread >= 4 ? 4 : per_thread >= 2 ? 2 : 1;
  const int step_bytes =
      std::max(m.load_bytes_in_flight_per_thread / std::max(m.loads_per_step, 1), 1);
  // A column lane's loads are vectors of vector_width values: at most 4 values a step in
  // flight, as for single columns, keeps its registers those of a single column's loop.
  if (k.kind == KernelKind::kColumnReduce) {
    const int cap =
        column_lane_bytes > 0 ? column_lane_bytes / step_bytes : 4 / std::max(m.vector_width, 1);
    loads = std::min(loads, std::max(1, cap));
  }
  // A row's vectors: two of them a step, 16 elements of f16, are already 32 bytes a thread
  // in flight (64 KiB an SM for #17's 2,048 threads, where Little's law asks under 10), and
  // every vector more unrolls its whole math into the loop ptxas compiles.
  if (k.kind == KernelKind::kRowReduce && m.vector_width > 1) loads = std::min(loads, 2);
  m.load_bytes_in_flight_per_thread = step_bytes * loads;
  m.loads_per_step = loads;
}

void ScheduleRowReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads) {
  const Node& h = g.nodes[k.hero];
  const int64_t rows = h.shape.elements();
  const int64_t row_len = rows > 0 ? g.nodes[h.operands[0]].shape.elements() / rows : 0;
  ThreadMapping& m = k.mapping;
  m.work_items = rows;
  if (row_len <= 512) {
    // A warp (or part of one) per row: no shared memory and no barriers.
    m.threads_per_row = std::min(NextPow2(row_len), 32);
    const int warps = block_threads > 0 ? block_threads / 32 : 8;
    m.rows_per_block = warps * (32 / m.threads_per_row);
    m.launch.block = {32, static_cast<uint32_t>(warps), 1};
    m.launch.grid = {CeilDivCapped(rows, m.rows_per_block, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  } else {
    const int threads = block_threads > 0  ? block_threads
                        : row_len <= 4096  ? 256
                        : row_len <= 16384 ? 512
                                           : 1024;
    m.threads_per_row = threads;
    m.rows_per_block = 1;
    m.launch.block = {static_cast<uint32_t>(threads), 1, 1};
    m.launch.grid = {CeilDivCapped(rows, 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
    m.shared_bytes = static_cast<uint32_t>(8 * (threads / 32) * k.outputs.size());
    m.block_barriers_per_item = 2;
  }
  // The phases of global kernels take vectors first, as column phases take lanes of several
  // columns; kernels of their own (suite row #27, the baselines' renditions) keep single
  // elements until a GPU run has timed their vectors.
  m.vector_width = block_threads > 0 ? RowReduceVectorWidth(g, k, row_len) : 1;
  SetTraffic(g, k, rows * row_len);
  // A vector's elements are loads of one access.
  m.load_bytes_in_flight_per_thread *= m.vector_width;
  SetLoadsPerStep(g, k);
}

void ScheduleColumnReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads) {
  const Node& h = g.nodes[k.hero];
  const int64_t kept = h.shape.elements();
  const int64_t reduced = kept > 0 ? g.nodes[h.operands[0]].shape.elements() / kept : 0;
  ThreadMapping& m = k.mapping;
  // Few tiles: taller blocks so each SM still gets enough threads to hide latency.
  m.column_tile_y = (CeilDiv(kept, 32) < int64_t{d.sms} * 4 && reduced >= 256) ? 32 : 8;
  if (block_threads > 0) m.column_tile_y = block_threads / 32;
  // Lanes of several columns go to the column phases of global kernels first, where the H100
  // found the miss (#18's phase read at 1.8 TB/s with one f16 column, half a row, per lane);
  // a kernel of its own, as the baselines' renditions use, keeps one column per lane until
  // a GPU run has measured the lanes.
  // The emitter keeps a partial of each reduce it computes per column and row of the tile,
  // in the reduce's accumulator type: no more than PartialBytes counts. Counting 8 bytes for
  // every output, reduce or not, took #20's phase (four outputs, two reduces) past static
  // shared memory at two columns a lane, so its lanes loaded one f16 each, half a row per warp.
  const std::vector<int> reduces = ComputedReduces(g, k);
  const int64_t partial_bytes = PartialBytes(g, reduces);
  m.vector_width = block_threads > 0 ? ColumnVectorWidth(g, k, d, partial_bytes,
                                                         static_cast<int64_t>(reduces.size()))
                                     : 1;
  m.registers_per_thread = ColumnLaneRegisters(g, k, m.vector_width);
  const int64_t tiles = CeilDiv(kept, ColumnTileWidth(m));
  m.launch.block = {32, static_cast<uint32_t>(m.column_tile_y), 1};
  m.launch.grid = {CeilDivCapped(tiles, 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  m.shared_bytes = static_cast<uint32_t>(partial_bytes * ColumnTileWidth(m) * m.column_tile_y);
  m.block_barriers_per_item = 2;
  m.work_items = tiles;
  SetTraffic(g, k, kept * reduced);
  // A lane's columns are independent loads of one access.
  m.load_bytes_in_flight_per_thread *= m.vector_width;
  SetLoadsPerStep(g, k);
}

namespace {

// The column reduction `unsplit` (as ScheduleColumnReduce scheduled it) with each tile's rows
// split into `chunks` chunks whose partials the last block of the tile combines
// (ThreadMapping::SplitCombine::kLastBlock): a block per work item, up to the grid cap.
KernelSpec SplitOverBlocks(const Graph& g, const KernelSpec& unsplit, const GpuDevice& d,
                           int64_t chunks) {
  KernelSpec split = unsplit;
  ThreadMapping& m = split.mapping;
  const int64_t kept = g.nodes[unsplit.hero].shape.elements();
  const int64_t tiles = CeilDiv(kept, ColumnTileWidth(m));
  m.reduce_chunks = static_cast<int>(chunks);
  m.split_combine = ThreadMapping::SplitCombine::kLastBlock;
  m.work_items = tiles * chunks;
  m.launch.grid = {CeilDivCapped(m.work_items, 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  // The arrival: a barrier before its atomic and one that hands its answer to the block.
  m.block_barriers_per_item += 2;
  // Every partial is written once and read back once, by the tile's last block.
  const int64_t partials = Sectors(PartialBytes(g, ComputedReduces(g, unsplit)) * kept * chunks);
  m.bytes_stored += partials;
  m.bytes_loaded += partials;
  SetLoadsPerStep(g, split);
  return split;
}

}  // namespace

}  // namespace stitch::internal

namespace stitch {

std::vector<KernelSpec> SplitColumnReduceCandidates(const Graph& g, const KernelSpec& kernel,
                                                    const GpuDevice& device) {
  std::vector<KernelSpec> candidates;
  if (kernel.kind != KernelKind::kColumnReduce || kernel.hero < 0) return candidates;
  if (g.nodes[kernel.hero].shape.elements() <= 0) return candidates;
  std::unique_ptr<CostModel> model = NewPlanningCostModel(device);
  for (int threads : {256, 512, 1024}) {
    KernelSpec unsplit = kernel;
    unsplit.mapping = ThreadMapping{};
    internal::ScheduleColumnReduce(g, unsplit, device, threads);
    std::optional<KernelSpec> best;
    double best_seconds = 0;
    for (int64_t chunks = 2; chunks <= internal::MaxReduceChunks(g, unsplit); chunks *= 2) {
      KernelSpec split = internal::SplitOverBlocks(g, unsplit, device, chunks);
      const double seconds = model->EstimateKernel(g, split).seconds;
      if (!best || seconds < best_seconds) {
        best_seconds = seconds;
        best = std::move(split);
      }
    }
    if (best) candidates.push_back(std::move(*best));
  }
  return candidates;
}

bool SplitColumnReduceOverBlocks(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  std::unique_ptr<CostModel> model = NewPlanningCostModel(device);
  double best = model->EstimateKernel(g, kernel).seconds;
  std::optional<KernelSpec> chosen;
  for (KernelSpec& split : SplitColumnReduceCandidates(g, kernel, device)) {
    const double seconds = model->EstimateKernel(g, split).seconds;
    if (seconds < best) {
      best = seconds;
      chosen = std::move(split);
    }
  }
  if (!chosen) return false;
  kernel = std::move(*chosen);
  return true;
}

}  // namespace stitch
