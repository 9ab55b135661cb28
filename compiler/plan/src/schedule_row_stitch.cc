// Row-stitched kernels: threads per row, rows held in registers or walked in loop mode, and
// loop-mode rows fitted to L2.
#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include "int_math.h"
#include "schedule_internal.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/op_classes.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace internal {
namespace {

// Row elements a thread may keep in registers per cached value. Rows held in registers are
// read from memory once; a row walked in a loop is read again by every pass (the H100 runs
// of the layernorm rows showed those re-reads cost 1.6-2.3x). 32 positions keep rows of up
// to 32 x 1024 elements resident, with room under 255 registers for a few cached values.
constexpr int kMaxValuesPerThread = 32;

// Positions a thread of a row kept in shared memory may own: its passes are unrolled over
// them as over registers, so this bounds the code's length (suite row #12's 50,304-element
// rows take 52 at 1,024 threads per row, in 4-element vectors).
constexpr int kMaxSharedValuesPerThread = 64;

// Vectors a thread of a row kept in shared memory loads at once where a pass first reads its
// row (ThreadMapping::loads_per_step): 64 bytes a thread, 64 KiB for an SM's block of 1,024
// threads, more than the 9.5 and 19.7 KiB per SM that the H100's and H200's fitted bandwidth
// and latency need (the static checks' in_flight), without a register per element of the
// thread's share of the row.
constexpr int kSharedRowVectorsInFlight = 4;

// The most consecutive elements of a row (8, 4, 2 or 1) a row-stitched thread takes at once:
// the count divides the row, that many elements of every row-space buffer fit one
// kMaxVectorBytes access, every thread of the row gets a vector, and, when the row stays in
// registers, the vectors need no more positions per thread than single elements would.
int RowVectorWidth(const Graph& g, const KernelSpec& k, const RowGeometry& geo, int threads_per_row,
                   bool registers) {
  const int64_t widest = WidestBufferElement(g, k, geo.rows * geo.row_len);
  const int64_t tpr = threads_per_row;
  for (int64_t v = 8; v > 1; v /= 2) {
    if (geo.row_len % v != 0 || v * widest > kMaxVectorBytes || geo.row_len < tpr * v) continue;
    const int64_t positions = (geo.row_len + tpr * v - 1) / (tpr * v) * v;
    if (!registers || positions == (geo.row_len + tpr - 1) / tpr) return static_cast<int>(v);
  }
  return 1;
}

// Bytes of one row a loop-mode row kernel loads again: every later pass that reads a loaded
// row-space value reads it from memory once more. With `distinct`, each such value's row
// counts once: what the row keeps in L2 between its passes.
int64_t LoopModeRereadBytes(const Graph& g, const KernelSpec& k, const RowStitchLayout& layout,
                            bool distinct = false) {
  const std::set<int> inputs(k.inputs.begin(), k.inputs.end());
  int64_t bytes = 0;
  for (size_t c = 0; c < layout.cached.size(); ++c) {
    const Node& n = g.nodes[layout.cached[c]];
    if (!inputs.count(layout.cached[c]) && n.op != OpCode::kParameter) continue;
    const int64_t again = layout.cached_pass_count[c] - 1;
    if (again <= 0) continue;
    bytes += (distinct ? 1 : again) * layout.geometry.row_len * DTypeBytes(n.shape.dtype);
  }
  return bytes;
}

// A row in loop mode reads its row once per pass: its rescaled sums share their max's pass,
// and what every later pass reads again is priced as re-reads.
void SetLoopModePasses(const Graph& g, const RowStitchLayout& layout, KernelSpec& k) {
  ThreadMapping& m = k.mapping;
  // A rescaled sum still combines across the row's threads after its max does, so the
  // block barriers stay as they are. Without one the passes are `layout`'s.
  m.rescaled_sums_in_one_pass = !layout.rescaled_sums.empty();
  StatusOr<RowStitchLayout> merged =
      m.rescaled_sums_in_one_pass ? AnalyzeRowStitch(g, k) : StatusOr<RowStitchLayout>(layout);
  if (!merged.ok()) m.rescaled_sums_in_one_pass = false;
  const RowStitchLayout& passes = merged.ok() ? *merged : layout;
  m.reread_bytes_per_item = LoopModeRereadBytes(g, k, passes);
  m.reread_footprint_bytes_per_item = LoopModeRereadBytes(g, k, passes, /*distinct=*/true);
}

// Instructions a thread issues per pass of a row-stitched mapping, estimated before any
// mapping is assembled so that the cost model's issue term can rank one kernel's mappings.
// Per row-space element: about two for a cheap op with its index and address arithmetic and
// for each load, store and reduce step, a dozen for a costly one (exact f32 division, exp's
// range reduction). The suite's row kernels assemble to 35-90 per element; the estimate
// needs the right order, not the digit, since every mapping of the kernel shares it. What
// differs between mappings is the elements a thread takes per pass (each walked once per
// pass over the row in loop mode) and each reduce's combine across the row's threads:
// shuffle steps, and a round through shared memory beyond a warp.
int EstimatedPassInstructions(const Graph& g, const KernelSpec& k, const RowStitchLayout& layout) {
  const RowGeometry& geo = layout.geometry;
  const int64_t row_space = geo.rows * geo.row_len;
  int64_t per_element = 2 * static_cast<int64_t>(k.inputs.size() + k.outputs.size());
  int reduces = 0;
  for (int id : k.nodes) {
    const Node& n = g.nodes[id];
    if (n.op == OpCode::kReduce) {
      per_element += 2;
      ++reduces;
    } else if (ClassOf(n.op) == OpClass::kElementwise && n.shape.elements() == row_space) {
      per_element += CostOf(n.op) == OpCost::kCostly ? 12 : 2;
    }
  }
  const ThreadMapping& m = k.mapping;
  const int64_t tpr = std::max(m.threads_per_row, 1);
  const int64_t passes_over_row =
      m.values_per_thread > 0 ? 1 : static_cast<int64_t>(layout.phases.size()) + 1;
  int64_t combine = 0;
  for (int64_t t = std::min<int64_t>(tpr, 32); t > 1; t /= 2) combine += 4;
  if (tpr > 32) combine += 16;
  const int64_t total =
      CeilDiv(geo.row_len, tpr) * per_element * passes_over_row + combine * reduces;
  return static_cast<int>(std::min<int64_t>(total, std::numeric_limits<int>::max()));
}

// EstimatedPassInstructions for a row tile, plus the staging: each value a thread keeps is
// stored to the tile and read back, with their addresses, and loaded p_width rows at a time.
int EstimatedTileInstructions(const Graph& g, const KernelSpec& k, const RowStitchLayout& layout) {
  const int64_t values = std::max(k.mapping.values_per_thread, 1);
  const int64_t staging = values * 4 + CeilDiv(values, RowTileStagingOf(g, k.mapping).p_width) * 2;
  return static_cast<int>(EstimatedPassInstructions(g, k, layout) + staging);
}

// The transpose a row-stitched kernel can stage a row tile at a time (ThreadMapping::
// transpose_tile), or -1: its only transpose that moves the minor-most dimension, whose float
// output is the row space with the rows' elements along its minor-most dimension, and
// through which every row-space input reaches the rows (an input read in row order would be
// strided while the tile is staged).
int RowTileTranspose(const Graph& g, const KernelSpec& k, const RowStitchLayout& layout) {
  if (!layout.column_reduces.empty()) return -1;
  const RowGeometry& geo = layout.geometry;
  const int found = StageableTranspose(g, k, geo.rows * geo.row_len);
  if (found < 0) return -1;
  const Shape& shape = g.nodes[found].shape;
  if (!IsFloat(shape.dtype) || shape.dims.back() != geo.row_len) return -1;
  return found;
}

// The launch and the row positions of row tiles of `rows` rows of `threads_per_row` threads
// each over `geo`, reading through `transpose`: a block per tile, every element of a row at
// a position of one of its threads, in the widest vectors that need no more positions.
ThreadMapping RowTileMapping(const Graph& g, const KernelSpec& k, const RowGeometry& geo,
                             int transpose, int rows, int threads_per_row, const GpuDevice& d) {
  ThreadMapping m;
  m.transpose_tile = transpose;
  m.threads_per_row = threads_per_row;
  m.rows_per_block = rows;
  m.launch.block = {static_cast<uint32_t>(rows * threads_per_row), 1, 1};
  m.launch.grid = {CeilDivCapped(geo.rows, rows, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  m.work_items = geo.rows;
  m.values_per_thread = static_cast<int>(geo.row_len / threads_per_row);
  m.vector_width = RowVectorWidth(g, k, geo, threads_per_row, /*registers=*/true);
  return m;
}

// Fills `k`'s mapping with row tiles of `rows` rows of `threads_per_row` threads (whole
// warps) each, every row held in registers. Returns false, the mapping then partly filled,
// where that does not fit: each row splits evenly into vectors over its threads, at most
// kMaxValuesPerThread positions each, the tiles cover the p run exactly, and a block with
// its registers and shared memory is resident on the device.
bool FillRowTile(const Graph& g, const RowStitchLayout& layout, int transpose, int rows,
                 int threads_per_row, const GpuDevice& d, KernelSpec& k) {
  const RowGeometry& geo = layout.geometry;
  const int64_t tpr = threads_per_row;
  if (TransposeTilesOf(g, transpose).p % rows != 0 || geo.row_len % tpr != 0 ||
      geo.row_len / tpr > kMaxValuesPerThread || rows * tpr > d.max_threads_per_block) {
    return false;
  }
  ThreadMapping& m = k.mapping;
  m = RowTileMapping(g, k, geo, transpose, rows, threads_per_row, d);
  int reduces = 0;
  for (const auto& p : layout.phases) reduces += static_cast<int>(p.size());
  const int cached = std::max(static_cast<int>(layout.cached.size()), 1);
  m.registers_per_thread = 32 + 2 * reduces + m.values_per_thread * cached;
  if (m.registers_per_thread > 255) return false;
  const RowTileStaging staging = RowTileStagingOf(g, m);
  const int64_t value_bytes = g.nodes[transpose].shape.dtype == DType::kF64 ? 8 : 4;
  int64_t shared = rows * staging.row_stride * value_bytes;
  // Several warps per row combine each reduce through a slot per warp.
  if (tpr > 32) shared += 8 * (tpr / 32) * rows * reduces;
  if (shared > d.max_static_shared_bytes_per_block) return false;
  m.shared_bytes = static_cast<uint32_t>(shared);
  if (ResidentBlocksPerSm(d, m) == 0) return false;
  // Two per round (the tile written, then read back); several warps per row add one per
  // phase and one guarding the slots' reuse, as a block per row does.
  m.block_barriers_per_item = static_cast<int>(2 * staging.rounds) +
                              (tpr > 32 ? static_cast<int>(layout.phases.size()) + 1 : 0);
  SetTraffic(g, k, geo.rows * geo.row_len);
  m.strided_input_bytes = m.strided_sector_bytes = m.strided_reuse_bytes = 0;
  // A round loads vector_width elements per thread together.
  m.load_bytes_in_flight_per_thread *= m.vector_width;
  return true;
}

// Loads a thread of a resident row tile issues at once while it stages the tile (each of
// p_width rows at one element), before their math and their stores to the tile: enough
// bytes in flight per SM with several blocks resident, without a register per element the
// thread stages.
constexpr int kResidentTileLoadsInFlight = 4;

// Fills `k`'s mapping with resident row tiles (ThreadMapping::transpose_tile with
// dynamic_shared_bytes): tiles of `rows` rows of `threads_per_row` threads (whole warps)
// each, staged whole into dynamic shared memory, every pass reading them from there and
// computing the rest again, so a thread keeps no value of its rows in registers. Its
// rescaled sums share their max's pass, as in loop mode. Returns false, the mapping then
// partly filled, where that does not fit: the rows split evenly over their threads into at
// most kMaxSharedValuesPerThread positions each, the tiles cover the p run, and a block with
// its tile is resident on the device.
bool FillResidentRowTile(const Graph& g, const KernelSpec& kernel, int transpose, int rows,
                         int threads_per_row, const GpuDevice& d, KernelSpec& k) {
  k = kernel;
  k.mapping.rescaled_sums_in_one_pass = true;
  StatusOr<RowStitchLayout> merged = AnalyzeRowStitch(g, k);
  if (!merged.ok()) {
    k.mapping.rescaled_sums_in_one_pass = false;
    merged = AnalyzeRowStitch(g, k);
    if (!merged.ok()) return false;
  }
  const RowStitchLayout& layout = *merged;
  const RowGeometry& geo = layout.geometry;
  const int64_t tpr = threads_per_row;
  if (TransposeTilesOf(g, transpose).p % rows != 0 || geo.row_len % tpr != 0 ||
      geo.row_len / tpr > kMaxSharedValuesPerThread || rows * tpr > d.max_threads_per_block) {
    return false;
  }
  const bool one_pass = k.mapping.rescaled_sums_in_one_pass;
  ThreadMapping& m = k.mapping;
  m = RowTileMapping(g, k, geo, transpose, rows, threads_per_row, d);
  m.rescaled_sums_in_one_pass = one_pass;
  // Marks the tile resident for RowTileStagingOf; the bytes follow from its staging.
  m.dynamic_shared_bytes = 1;
  const RowTileStaging staging = RowTileStagingOf(g, m);
  const int64_t passes = staging.round * staging.p_lanes / (rows * tpr);
  m.loads_per_step = static_cast<int>(std::min<int64_t>(kResidentTileLoadsInFlight, passes));
  const int64_t value_bytes = g.nodes[transpose].shape.dtype == DType::kF64 ? 8 : 4;
  const int64_t tile_bytes = rows * staging.row_stride * value_bytes;
  int reduces = 0;
  for (const auto& p : layout.phases) reduces += static_cast<int>(p.size());
  // Several warps per row combine each reduce through a slot per warp.
  const int64_t slots = tpr > 32 ? 8 * (tpr / 32) * rows * reduces : 0;
  if (slots > d.max_static_shared_bytes_per_block ||
      slots + tile_bytes > d.max_shared_bytes_per_block) {
    return false;
  }
  m.shared_bytes = static_cast<uint32_t>(slots);
  m.dynamic_shared_bytes = static_cast<uint32_t>(tile_bytes);
  // The staging's loads in flight hold their values in registers until stored to the tile,
  // and each position of the thread's rows about one more, for its index and what each pass
  // loads there (the suite's #13 assembles to 64 registers at 32 positions, 122 at 64).
  m.registers_per_thread = 32 + 2 * reduces + m.values_per_thread +
                           static_cast<int>(m.loads_per_step * staging.p_width * value_bytes / 4);
  if (ResidentBlocksPerSm(d, m) == 0) return false;
  // One after the staging and one guarding the tile's reuse; several warps per row add one
  // per phase and one guarding the slots' reuse, as a block per row does.
  m.block_barriers_per_item = 2 + (tpr > 32 ? static_cast<int>(layout.phases.size()) + 1 : 0);
  SetTraffic(g, k, geo.rows * geo.row_len);
  m.strided_input_bytes = m.strided_sector_bytes = m.strided_reuse_bytes = 0;
  m.load_bytes_in_flight_per_thread *= m.loads_per_step * static_cast<int>(staging.p_width);
  return true;
}

// How far above the best issue-aware price a row mapping chosen on memory alone must be
// priced before the issue term overrules it: the estimate's error on the suite's row
// kernels is within about a quarter.
constexpr double kIssueOverruleRatio = 1.25;

// Keeps the values of the rows of `k`, filled by FillRowStitch in loop mode for `layout`
// (analysed with the plain passes a row in shared memory runs), in dynamic shared memory
// instead of re-reading them, where a block per row holds its kept values
// (SharedRowRegionsOf) within the device's shared memory per block and its threads' shares of
// the row within kMaxSharedValuesPerThread: every pass after the first reads them from there,
// so the row crosses DRAM once, as a row held in registers does. One such block fills an
// SM's shared memory on the rows this is for (suite row #12's 201 KB), so its loads in
// flight come from `vectors_in_flight` vectors per thread. Returns false, leaving `k` as it
// was, where that does not fit.
bool KeepRowInSharedMemory(const Graph& g, const RowStitchLayout& layout, const GpuDevice& d,
                           KernelSpec& k, int vectors_in_flight = kSharedRowVectorsInFlight) {
  const RowGeometry& geo = layout.geometry;
  int reduces = 0;
  for (const auto& p : layout.phases) reduces += static_cast<int>(p.size());
  const int64_t tpr = k.mapping.threads_per_row;
  if (tpr <= 32 || layout.kept.empty() || !layout.column_reduces.empty()) return false;
  const SharedRowRegions regions = SharedRowRegionsOf(g, layout);
  if (int64_t{k.mapping.shared_bytes} + regions.bytes > d.max_shared_bytes_per_block) return false;
  const int64_t w = RowVectorWidth(g, k, geo, static_cast<int>(tpr), /*registers=*/false);
  const int64_t positions = CeilDiv(geo.row_len, tpr * w) * w;
  if (positions > kMaxSharedValuesPerThread) return false;
  KernelSpec shared = k;
  ThreadMapping& m = shared.mapping;
  m.vector_width = static_cast<int>(w);
  m.values_per_thread = static_cast<int>(positions);
  m.dynamic_shared_bytes = static_cast<uint32_t>(regions.bytes);
  m.loads_per_step = static_cast<int>(std::min<int64_t>(vectors_in_flight, positions / w));
  m.rescaled_sums_in_one_pass = false;
  m.reread_bytes_per_item = m.reread_footprint_bytes_per_item = 0;
  SetTraffic(g, shared, geo.rows * geo.row_len);
  m.load_bytes_in_flight_per_thread *= m.loads_per_step * m.vector_width;
  // The loads in flight hold their bytes in registers until stored to their slots.
  m.registers_per_thread = 32 + 2 * reduces + m.load_bytes_in_flight_per_thread / 4;
  if (ResidentBlocksPerSm(d, m) == 0) return false;
  k = std::move(shared);
  return true;
}

// The layout of `kernel` with the plain passes a row kept in shared memory runs: it re-reads
// nothing, so its rescaled sums keep a pass of their own, as rows in registers do.
StatusOr<RowStitchLayout> SharedRowLayout(const Graph& g, const KernelSpec& kernel) {
  KernelSpec plain = kernel;
  plain.mapping.rescaled_sums_in_one_pass = false;
  return AnalyzeRowStitch(g, plain);
}

}  // namespace

bool FillRowStitch(const Graph& g, const RowStitchLayout& layout, int threads_per_row,
                   const GpuDevice& d, int block_threads, KernelSpec& k) {
  const RowGeometry& geo = layout.geometry;
  ThreadMapping& m = k.mapping;
  m = ThreadMapping{};
  m.threads_per_row = threads_per_row;
  m.work_items = geo.rows;
  int reduces = 0;
  for (const auto& p : layout.phases) reduces += static_cast<int>(p.size());
  if (threads_per_row <= 32) {
    const int64_t rows_per_warp = 32 / threads_per_row;
    const int64_t warps_needed = (geo.rows + rows_per_warp - 1) / rows_per_warp;
    // Fewer warps per block when rows are few, so the blocks spread over every SM.
    int warps = 8;
    while (warps > 1 && warps_needed / warps < int64_t{d.sms} * 2) warps /= 2;
    if (block_threads > 0) warps = block_threads / 32;
    m.rows_per_block = static_cast<int>(warps * rows_per_warp);
    m.launch.block = {32, static_cast<uint32_t>(warps), 1};
  } else {
    m.rows_per_block = 1;
    m.launch.block = {static_cast<uint32_t>(threads_per_row), 1, 1};
    // One slot per warp and reduce; results are read by every thread after one barrier,
    // and a last barrier per row guards the slots' reuse.
    m.shared_bytes = static_cast<uint32_t>(8 * (threads_per_row / 32) * reduces);
    m.block_barriers_per_item = static_cast<int>(layout.phases.size()) + 1;
  }
  m.launch.grid = {CeilDivCapped(geo.rows, m.rows_per_block, int64_t{d.sms} * kMaxBlocksPerSm), 1,
                   1};
  const int64_t per_thread = (geo.row_len + threads_per_row - 1) / threads_per_row;
  const int cached = static_cast<int>(layout.cached.size());
  m.values_per_thread = per_thread <= kMaxValuesPerThread ? static_cast<int>(per_thread) : 0;
  m.vector_width = RowVectorWidth(g, k, geo, threads_per_row, m.values_per_thread > 0);
  // Column reduces keep an accumulator per register position.
  const int columns = static_cast<int>(layout.column_reduces.size());
  m.registers_per_thread = 32 + 2 * reduces + m.values_per_thread * (std::max(cached, 1) + columns);
  if (m.registers_per_thread > 255) {
    m.values_per_thread = 0;
    m.registers_per_thread = 32 + 2 * reduces;
  }
  SetTraffic(g, k, geo.rows * geo.row_len);
  if (m.values_per_thread == 0) SetLoopModePasses(g, layout, k);
  // A thread's register positions are independent loads, as are a vector's elements.
  m.load_bytes_in_flight_per_thread *=
      m.values_per_thread > 0 ? m.values_per_thread : m.vector_width;
  if (columns == 0) return true;
  // The row groups of a block combine their column partials through a slot per thread.
  const int64_t groups = static_cast<int64_t>(m.launch.block_threads()) / threads_per_row;
  if (groups > 1) {
    m.shared_bytes += static_cast<uint32_t>(PartialBytes(g, layout.column_reduces) *
                                            static_cast<int64_t>(m.launch.block_threads()));
  }
  return m.values_per_thread > 0;
}

// Prices the column reduces of a row-stitched phase on its final grid: each block writes one
// partial per column, read back once by the combine behind one more grid barrier.
void AddColumnPartials(const Graph& g, KernelSpec& k) {
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, k);
  if (!layout.ok() || layout->column_reduces.empty()) return;
  ThreadMapping& m = k.mapping;
  m.reduce_chunks = static_cast<int>(m.launch.grid[0]);
  m.grid_barriers += 1;
  const int64_t partials =
      Sectors(PartialBytes(g, layout->column_reduces) * layout->geometry.row_len * m.reduce_chunks);
  m.bytes_stored += partials;
  m.bytes_loaded += partials;
}

// The threads per row a row-stitched kernel is tried with, in order: a share of a warp for
// short rows (down to a quarter of the row's first 32 elements per thread), then whole
// blocks of 64 to 1024 threads while half of them still get an element. A global kernel's
// phase (`block_threads` > 0) tries only its kernel's block among the latter.
std::vector<int> ThreadsPerRowCandidates(int64_t row_len, int block_threads) {
  std::vector<int> candidates;
  for (int t = std::min(NextPow2(row_len), 32); t >= 1 && t * 4 >= std::min<int64_t>(row_len, 32);
       t /= 2) {
    candidates.push_back(t);
  }
  for (int t = 64; t <= 1024 && (t / 2) < row_len; t *= 2) {
    if (block_threads == 0 || t == block_threads) candidates.push_back(t);
  }
  if (block_threads > 0 && row_len > 32 && candidates.back() != block_threads) {
    candidates.push_back(block_threads);
  }
  return candidates;
}

Status ScheduleRowStitch(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads) {
  STITCH_ASSIGN_OR_RETURN(RowStitchLayout layout, AnalyzeRowStitch(g, k));
  if (!layout.column_reduces.empty() && block_threads == 0) {
    return InvalidArgument("kernel " + k.name +
                           ": column reduces of rows run only as a phase of a global_stitch "
                           "kernel");
  }
  const std::vector<int> candidates =
      ThreadsPerRowCandidates(layout.geometry.row_len, block_threads);
  std::unique_ptr<CostModel> model = NewPlanningCostModel(d);
  std::unique_ptr<CostModel> issue_model = NewAnalyticalCostModel(d, WithFittedIssueTerm(d));
  // Where later passes over a row read values an earlier pass read or computed (the
  // layout's cached values), mappings that keep the row in registers come first, as
  // Triton's persistent reductions do: the model prices a pass over a row the same whether
  // it hits in cache or not, and on the GPU the re-read is what the loop mode loses.
  const bool rereads = !layout.cached.empty();
  double best = std::numeric_limits<double>::infinity();
  bool best_in_registers = false;
  int best_threads = candidates.front();
  // The same in-register mappings priced with the issue term on an estimated instruction
  // count (a kernel of its own only: a global kernel's phase shares the cubin).
  double best_issue_priced = std::numeric_limits<double>::infinity();
  double least_issue_priced = std::numeric_limits<double>::infinity();
  int least_issue_threads = 0;
  for (int t : candidates) {
    if (!FillRowStitch(g, layout, t, d, block_threads, k)) continue;
    if (ResidentBlocksPerSm(d, k.mapping) == 0) continue;
    const bool in_registers = rereads && k.mapping.values_per_thread > 0;
    if (best_in_registers && !in_registers) continue;
    double issue_priced = std::numeric_limits<double>::infinity();
    if (in_registers && block_threads == 0) {
      KernelSpec priced = k;
      priced.mapping.estimated_instructions = EstimatedPassInstructions(g, k, layout);
      issue_priced = issue_model->EstimateKernel(g, priced).seconds;
      if (issue_priced < least_issue_priced) {
        least_issue_priced = issue_priced;
        least_issue_threads = t;
      }
    }
    const double s = model->EstimateKernel(g, k).seconds;
    if (s < best || (in_registers && !best_in_registers)) {
      best = s;
      best_threads = t;
      best_in_registers = in_registers;
      best_issue_priced = issue_priced;
    }
  }
  // The issue term weighs the bytes a thread keeps in flight against the warps that hide
  // each other's latency: many values per thread cost registers, and one large block per SM
  // leaves each scheduler two warps (the H100 ran suite row #29's 32 values per thread, 168
  // registers, at 0.29x torch.compile). Its instruction count is an estimate, so it only
  // overrules the choice above when it prices that choice well above the best it finds.
  if (best_in_registers && least_issue_threads > 0 &&
      best_issue_priced > kIssueOverruleRatio * least_issue_priced) {
    best_threads = least_issue_threads;
  }
  if (!FillRowStitch(g, layout, best_threads, d, block_threads, k) ||
      ResidentBlocksPerSm(d, k.mapping) == 0) {
    return ResourceExhausted("kernel " + k.name + ": no row mapping fits " + d.name);
  }
  return Status::Ok();
}

}  // namespace internal

using internal::EstimatedPassInstructions;
using internal::EstimatedTileInstructions;
using internal::FillResidentRowTile;
using internal::FillRowStitch;
using internal::FillRowTile;
using internal::KeepRowInSharedMemory;
using internal::RowTileTranspose;
using internal::SharedRowLayout;

std::vector<KernelSpec> RowStitchMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                   const GpuDevice& device) {
  std::vector<KernelSpec> candidates;
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, kernel);
  if (!layout.ok() || !layout->column_reduces.empty()) return candidates;
  for (int t : internal::ThreadsPerRowCandidates(layout->geometry.row_len, 0)) {
    KernelSpec candidate = kernel;
    if (!FillRowStitch(g, *layout, t, device, 0, candidate)) continue;
    if (ResidentBlocksPerSm(device, candidate.mapping) == 0) continue;
    KernelSpec staged = candidate;
    const bool stages = StageRowSpans(g, staged, device);
    candidates.push_back(std::move(candidate));
    if (stages) candidates.push_back(std::move(staged));
  }
  StatusOr<RowStitchLayout> plain_layout = SharedRowLayout(g, kernel);
  if (!plain_layout.ok()) return candidates;
  for (int t : internal::ThreadsPerRowCandidates(plain_layout->geometry.row_len, 0)) {
    for (int vectors : {1, 2, 4}) {
      KernelSpec candidate = kernel;
      if (!FillRowStitch(g, *plain_layout, t, device, 0, candidate) ||
          candidate.mapping.values_per_thread > 0 ||
          !KeepRowInSharedMemory(g, *plain_layout, device, candidate, vectors) ||
          candidate.mapping.loads_per_step != vectors) {
        continue;
      }
      candidates.push_back(std::move(candidate));
    }
  }
  // Rows read through a transpose: the resident row tiles TileTransposedRows chooses among
  // beside the tiles it holds in registers (suite row #13's shipped one ran slower than the
  // XLA model's two kernels on the H200, latency-bound at one block per SM).
  const int transpose = RowTileTranspose(g, kernel, *layout);
  if (transpose < 0) return candidates;
  for (int rows : {4, 8, 16}) {
    for (int threads : {32, 64, 128}) {
      KernelSpec candidate = kernel;
      if (FillResidentRowTile(g, kernel, transpose, rows, threads, device, candidate)) {
        candidates.push_back(std::move(candidate));
      }
    }
  }
  return candidates;
}

namespace {

// Whether a buffer's elements may be staged: the floats a row kernel computes in f32.
bool StagedElement(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace

RowSpanStaging RowSpanStagingOf(const Graph& g, const KernelSpec& kernel,
                                const RowStitchLayout& layout) {
  const ThreadMapping& m = kernel.mapping;
  const RowGeometry& geo = layout.geometry;
  if (kernel.kind != KernelKind::kRowStitch || !m.warp_rows_in_registers() ||
      !layout.column_reduces.empty()) {
    return {};
  }
  const int64_t elements = geo.rows * geo.row_len;
  if (int64_t{m.vector_width} * internal::WidestBufferElement(g, kernel, elements) >=
      kMaxVectorBytes) {
    return {};
  }
  RowSpanStaging s;
  s.rows = m.rows_per_block;
  s.span = s.rows * geo.row_len;
  const auto stageable = [&](int id) {
    const Shape& shape = g.nodes[id].shape;
    const int64_t bytes = DTypeBytes(shape.dtype);
    return shape.elements() == elements && StagedElement(shape.dtype) &&
           s.span * bytes % kMaxVectorBytes == 0 && elements * bytes % kMaxVectorBytes == 0;
  };
  for (int id : kernel.inputs) {
    if (stageable(id)) s.inputs.push_back(id);
  }
  for (int id : layout.row_space_outputs) {
    if (stageable(id)) s.outputs.push_back(id);
  }
  if (s.inputs.empty()) return {};
  for (const std::vector<int>* staged : {&s.inputs, &s.outputs}) {
    for (int id : *staged) s.shared_bytes += s.span * DTypeBytes(g.nodes[id].shape.dtype);
  }
  return s;
}

bool StageRowSpans(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.kind != KernelKind::kRowStitch || kernel.mapping.staged_row_spans) return false;
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, kernel);
  if (!layout.ok()) return false;
  const RowSpanStaging s = RowSpanStagingOf(g, kernel, *layout);
  if (s.span == 0) return false;
  KernelSpec staged = kernel;
  ThreadMapping& m = staged.mapping;
  const int64_t shared = int64_t{m.shared_bytes} + s.shared_bytes;
  if (shared > device.max_static_shared_bytes_per_block) return false;
  m.staged_row_spans = true;
  m.shared_bytes = static_cast<uint32_t>(shared);
  // One barrier between the copy in and the rows' passes, one before the spans are reused.
  m.block_barriers_per_item += 2;
  // A thread's share of the inputs' spans, all its vectors loaded before any is stored.
  int64_t span_bytes = 0;
  for (int id : s.inputs) span_bytes += s.span * DTypeBytes(g.nodes[id].shape.dtype);
  m.load_bytes_in_flight_per_thread = static_cast<int>(
      std::max<int64_t>(span_bytes / static_cast<int64_t>(m.launch.block_threads()), 1));
  if (ResidentBlocksPerSm(device, m) < ResidentBlocksPerSm(device, kernel.mapping)) return false;
  kernel = std::move(staged);
  return true;
}

RowTileStaging RowTileStagingOf(const Graph& g, const ThreadMapping& m) {
  RowTileStaging s;
  if (m.transpose_tile < 0) return s;
  const TransposeTiles tiles = TransposeTilesOf(g, m.transpose_tile);
  const int64_t rows = std::max(m.rows_per_block, 1);
  const int64_t operand_minor =
      tiles.p_dims.empty() ? 1 : g.nodes[m.transpose_tile].shape.dims[tiles.p_dims.back()];
  const int64_t width = std::max(m.vector_width, 1);
  for (int64_t w = 4; w >= 1; w /= 2) {
    if (rows % w == 0 && operand_minor % w == 0 && w <= width) {
      s.p_width = w;
      break;
    }
  }
  s.round = int64_t{m.threads_per_row} * width;
  // A resident tile (dynamic_shared_bytes) holds its rows whole: one round of the row.
  if (m.resident_row_tile()) s.round = int64_t{m.threads_per_row} * m.values_per_thread;
  // With 4 values of padding the rows a warp computes side by side (p_width apart) start
  // 4 x p_width banks apart and each spans 32 / p_lanes = 4 x p_width elements of a tile of 8
  // rows: no bank conflicts there, two-way in a tile of 16. In a tile of 4 a lane takes all 4
  // rows of one element, so each row's 32 values of a warp are consecutive: no conflicts.
  // Rows stay 16-byte aligned.
  s.row_stride = s.round + 4;
  s.rounds = m.resident_row_tile() ? 1 : m.values_per_thread / width;
  s.p_lanes = rows / s.p_width;
  return s;
}

bool MapRowTiles(const Graph& g, KernelSpec& kernel, const GpuDevice& device, int rows_per_block,
                 int threads_per_row, bool resident) {
  if (kernel.kind != KernelKind::kRowStitch) return false;
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, kernel);
  if (!layout.ok()) return false;
  const int transpose = RowTileTranspose(g, kernel, *layout);
  if (transpose < 0) return false;
  KernelSpec trial = kernel;
  const bool filled =
      resident ? FillResidentRowTile(g, kernel, transpose, rows_per_block, threads_per_row, device,
                                     trial)
               : FillRowTile(g, *layout, transpose, rows_per_block, threads_per_row, device, trial);
  if (!filled) return false;
  kernel = std::move(trial);
  return true;
}

void TileTransposedRows(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.kind != KernelKind::kRowStitch || kernel.mapping.transpose_tile >= 0) return;
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, kernel);
  if (!layout.ok()) return;
  const int transpose = RowTileTranspose(g, kernel, *layout);
  if (transpose < 0) return;
  // Priced with the fitted constants: the planning version has no reuse window, so it
  // takes every strided re-read for an L2 hit and sees nothing to gain.
  std::unique_ptr<CostModel> model =
      NewAnalyticalCostModel(device, CostModelParametersFor(device, kCurrentCostModel));
  // Both sides are priced with the instructions the scheduler expects of them: a tile's
  // phases cannot hide each other within its block (the cost model's overlap rule), so what
  // it saves in bytes it can lose in issue time where few blocks share an SM.
  KernelSpec strided = kernel;
  strided.mapping.estimated_instructions = EstimatedPassInstructions(g, kernel, *layout);
  std::optional<KernelSpec> best;
  double best_seconds = model->EstimateKernel(g, strided).seconds;
  // Tiles of 8 rows read a 32-byte sector of a 4-byte operand, or half of one of a 2-byte
  // operand, whose other half the next tile reads; 16 rows read whole sectors of both. Tiles
  // of 4 rows read a quarter of a 2-byte operand's sector, the rest from L2 after the blocks
  // beside them, but are small enough for two blocks per SM where 8 rows of the same threads
  // per row take a whole SM (suite row #13).
  // Tiles held in registers only: resident tiles (FillResidentRowTile) are swept
  // (RowStitchMappingCandidates) but not chosen until a GPU has timed them, as the register
  // tiles the model first priced at half the two kernels' time ran slower than those.
  for (int rows : {4, 8, 16}) {
    for (int threads = 32; threads <= 1024; threads *= 2) {
      KernelSpec trial = kernel;
      if (!FillRowTile(g, *layout, transpose, rows, threads, device, trial)) continue;
      trial.mapping.estimated_instructions = EstimatedTileInstructions(g, trial, *layout);
      const double seconds = model->EstimateKernel(g, trial).seconds;
      if (seconds < best_seconds) {
        best_seconds = seconds;
        best = std::move(trial);
      }
    }
  }
  if (best) kernel = std::move(*best);
}

void KeepLoopRowsInSharedMemory(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.kind != KernelKind::kRowStitch || kernel.mapping.values_per_thread > 0 ||
      kernel.mapping.transpose_tile >= 0) {
    return;
  }
  StatusOr<RowStitchLayout> layout = SharedRowLayout(g, kernel);
  if (!layout.ok() || layout->cached.empty()) return;
  std::unique_ptr<CostModel> model = NewPlanningCostModel(device);
  std::optional<KernelSpec> best;
  double best_seconds = std::numeric_limits<double>::infinity();
  for (int threads = 64;
       threads <= device.max_threads_per_block && threads / 2 < layout->geometry.row_len;
       threads *= 2) {
    KernelSpec trial = kernel;
    if (!FillRowStitch(g, *layout, threads, device, 0, trial) ||
        !KeepRowInSharedMemory(g, *layout, device, trial)) {
      continue;
    }
    const double seconds = model->EstimateKernel(g, trial).seconds;
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best = std::move(trial);
    }
  }
  if (best) kernel = std::move(*best);
}

void FitLoopRowsInL2(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  const ThreadMapping& m = kernel.mapping;
  if (kernel.kind != KernelKind::kRowStitch || m.values_per_thread > 0 ||
      m.reread_footprint_bytes_per_item <= 0 || m.rows_per_block != 1) {
    return;
  }
  const CostModelParameters fitted = CostModelParametersFor(device, kCurrentCostModel);
  const int64_t rows_in_window = static_cast<int64_t>(
      fitted.reuse_window_bytes / static_cast<double>(m.reread_footprint_bytes_per_item));
  if (rows_in_window < 1) return;  // no fitted window, or one row outgrows it
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, kernel);
  if (!layout.ok()) return;
  // Priced with the fitted constants: the planning version has no reuse window, so it
  // takes every re-read for an L2 hit and sees nothing to gain.
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device, fitted);
  KernelSpec best = kernel;
  double best_seconds = model->EstimateKernel(g, kernel).seconds;
  // The largest blocks keep the most bytes in flight per row in flight.
  for (int threads = 1024; threads >= 256 && threads / 2 < layout->geometry.row_len; threads /= 2) {
    KernelSpec trial = kernel;
    if (!FillRowStitch(g, *layout, threads, device, 0, trial) ||
        trial.mapping.values_per_thread > 0 || ResidentBlocksPerSm(device, trial.mapping) == 0) {
      continue;
    }
    uint32_t& grid = trial.mapping.launch.grid[0];
    grid = static_cast<uint32_t>(std::min<int64_t>(grid, rows_in_window));
    const double seconds = model->EstimateKernel(g, trial).seconds;
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best = std::move(trial);
    }
  }
  kernel = std::move(best);
}

}  // namespace stitch
