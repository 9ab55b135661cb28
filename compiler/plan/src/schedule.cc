#include "stitch/plan/schedule.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "int_math.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/op_classes.h"
#include "stitch/plan/row_stitch.h"

namespace stitch {
namespace {

// Beyond a few waves a grid-stride loop is as fast and the launch is cheaper.
constexpr int64_t kMaxBlocksPerSm = 32;
// Row elements a thread may keep in registers per cached value. Rows held in registers are
// read from memory once; a row walked in a loop is read again by every pass (the H100 runs
// of the layernorm rows showed those re-reads cost 1.6-2.3x). 32 positions keep rows of up
// to 32 x 1024 elements resident, with room under 255 registers for a few cached values.
constexpr int kMaxValuesPerThread = 32;

uint32_t CeilDivCapped(int64_t n, int64_t d, int64_t cap) {
  int64_t q = d > 0 ? (n + d - 1) / d : 0;
  return static_cast<uint32_t>(std::clamp<int64_t>(q, 1, cap));
}

int NextPow2(int64_t n) {
  int p = 1;
  while (p < n && p < (1 << 20)) p *= 2;
  return p;
}

// DRAM moves 32-byte sectors, and buffers start on sector boundaries, so each buffer's
// bytes are rounded up to whole sectors.
int64_t Sectors(int64_t bytes) { return (bytes + 31) / 32 * 32; }

// Footprint traffic: each input buffer read once and each output written once. Re-reads of
// the same bytes inside one launch are served by L1/L2 (rows of a stitched kernel are a few
// hundred KiB at most while they are being reused), so they are not DRAM traffic.
// Loads in flight count only inputs streamed element by element over the kernel's
// iteration space of `elements`; smaller inputs (a row's statistics, a bias) are reused
// from cache and do not wait on DRAM.

// Elements of `node` the kernel reads when it reads them only through slices (a statistic's
// shift, say), possibly after unary elementwise ops such as a convert; -1 when it reads
// them all.
int64_t SlicedElements(const Graph& g, const KernelSpec& k, int node) {
  if (std::find(k.outputs.begin(), k.outputs.end(), node) != k.outputs.end()) return -1;
  int64_t sliced = 0;
  for (int id : k.nodes) {
    const Node& n = g.nodes[id];
    if (std::find(n.operands.begin(), n.operands.end(), node) == n.operands.end()) continue;
    int64_t read = n.op == OpCode::kSlice ? n.shape.elements() : -1;
    if (ClassOf(n.op) == OpClass::kElementwise && n.operands.size() == 1) {
      read = SlicedElements(g, k, id);
    }
    if (read < 0) return -1;
    sliced += read;
  }
  return sliced;
}

// An input read only through slices costs the slices' bytes, not the whole buffer's.
int64_t InputBytes(const Graph& g, const KernelSpec& k, int input) {
  const Shape& s = g.nodes[input].shape;
  const int64_t sliced = SlicedElements(g, k, input);
  if (sliced < 0 || sliced >= s.elements()) return Sectors(s.bytes());
  return Sectors(sliced * DTypeBytes(s.dtype));
}

// Adds to `found` the kernel inputs whose elements reach node `id` one to one, through
// elementwise ops and reshapes, which keep the linear order of the elements.
void OneToOneInputs(const Graph& g, const KernelSpec& k, int id, std::set<int>& found) {
  if (std::find(k.inputs.begin(), k.inputs.end(), id) != k.inputs.end()) {
    found.insert(id);
    return;
  }
  if (std::find(k.nodes.begin(), k.nodes.end(), id) == k.nodes.end()) return;
  const Node& n = g.nodes[id];
  if (ClassOf(n.op) != OpClass::kElementwise && n.op != OpCode::kReshape) return;
  for (int operand : n.operands) {
    if (g.nodes[operand].shape.elements() == n.shape.elements()) {
      OneToOneInputs(g, k, operand, found);
    }
  }
}

// Inputs read through a transpose that moves their minor-most dimension: threads walk the
// transpose's output in order, so one input sector serves the next thread only after
// `stride` output elements, each of which fetched a sector of its own in the meantime.
void SetStridedTraffic(const Graph& g, KernelSpec& k) {
  constexpr int64_t kSectorBytes = 32;
  k.mapping.strided_reuse_bytes = 0;
  std::set<int> strided;
  for (int id : k.nodes) {
    const Node& t = g.nodes[id];
    if (t.op != OpCode::kTranspose) continue;
    const int rank = t.shape.rank();
    const auto minor = std::find(t.dimensions.begin(), t.dimensions.end(), rank - 1);
    if (minor == t.dimensions.end()) continue;
    int64_t stride = 1;
    for (auto d = minor + 1; d != t.dimensions.end(); ++d) {
      stride *= t.shape.dims[static_cast<size_t>(d - t.dimensions.begin())];
    }
    if (stride == 1) continue;
    std::set<int> reached;
    OneToOneInputs(g, k, t.operands[0], reached);
    if (reached.empty()) continue;
    strided.insert(reached.begin(), reached.end());
    k.mapping.strided_reuse_bytes = std::max(k.mapping.strided_reuse_bytes, stride * kSectorBytes);
  }
  k.mapping.strided_input_bytes = 0;
  k.mapping.strided_sector_bytes = 0;
  for (int i : strided) {
    k.mapping.strided_input_bytes += InputBytes(g, k, i);
    k.mapping.strided_sector_bytes += g.nodes[i].shape.elements() * kSectorBytes;
  }
}

// The transpose a loop kernel can stage through shared memory tiles (ThreadMapping::
// transpose_tile), or -1: its only transpose that moves the minor-most dimension, with float
// outputs of the transpose's element count (shared memory holds their compute type), side
// lengths that fill most of a tile, and every full-size input read through it. An input read
// in output order would be strided instead while the tile is computed.
int TileableTranspose(const Graph& g, const KernelSpec& k) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  int found = -1;
  for (int id : k.nodes) {
    if (!MovesMinorDimension(g, id)) continue;
    if (found >= 0) return -1;
    found = id;
  }
  if (found < 0 || g.nodes[found].shape.elements() != n) return -1;
  const TransposeTiles tiles = TransposeTilesOf(g, found);
  if (tiles.p < 8 || tiles.q < 16) return -1;
  for (int o : k.outputs) {
    const DType t = g.nodes[o].shape.dtype;
    if (!IsFloat(t) || g.nodes[o].shape.elements() != n) return -1;
  }
  std::set<int> through;
  OneToOneInputs(g, k, g.nodes[found].operands[0], through);
  if (through.empty()) return -1;
  for (int i : k.inputs) {
    if (g.nodes[i].shape.elements() == n && !through.count(i)) return -1;
  }
  return found;
}

void SetTraffic(const Graph& g, KernelSpec& k, int64_t elements) {
  k.mapping.bytes_loaded = 0;
  k.mapping.bytes_stored = 0;
  for (int i : k.inputs) k.mapping.bytes_loaded += InputBytes(g, k, i);
  for (int o : k.outputs) k.mapping.bytes_stored += Sectors(g.nodes[o].shape.bytes());
  int in_flight = 0;
  for (int i : k.inputs) {
    if (g.nodes[i].shape.elements() >= elements) in_flight += DTypeBytes(g.nodes[i].shape.dtype);
  }
  k.mapping.load_bytes_in_flight_per_thread = std::max(in_flight, 1);
  SetStridedTraffic(g, k);
}

// The widest element, in bytes (at least 1), among `k`'s inputs and outputs of `elements`
// elements: the buffers whose accesses a vector of that many consecutive elements widens.
int64_t WidestBufferElement(const Graph& g, const KernelSpec& k, int64_t elements) {
  int64_t widest = 1;
  for (const std::vector<int>* buffers : {&k.inputs, &k.outputs}) {
    for (int id : *buffers) {
      const Shape& s = g.nodes[id].shape;
      if (s.elements() == elements) widest = std::max<int64_t>(widest, DTypeBytes(s.dtype));
    }
  }
  return widest;
}

// The most consecutive elements (8, 4, 2 or 1) a loop kernel's thread can handle per pass:
// the count divides the kernel's `n` elements, that many elements of every full-size buffer
// fit one kMaxVectorBytes access, and every thread of a block still gets a vector.
int LoopVectorWidth(const Graph& g, const KernelSpec& k, int64_t n, int64_t block,
                    int max_width = 8) {
  const int64_t widest = WidestBufferElement(g, k, n);
  for (int v = max_width; v > 1; v /= 2) {
    if (n % v == 0 && v * widest <= kMaxVectorBytes && n / v >= block) return v;
  }
  return 1;
}

// In each Schedule* function a nonzero `block_threads` fixes the block size: the phases of
// a global kernel share one.
void ScheduleLoop(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0,
                  int max_vector_width = 8) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  ThreadMapping& m = k.mapping;
  // Round tiny sizes up to whole warps; 256 threads keep 8 blocks resident per SM.
  const int64_t block = block_threads > 0
                            ? block_threads
                            : std::min<int64_t>(256, std::max<int64_t>(32, (n + 31) / 32 * 32));
  m.vector_width = LoopVectorWidth(g, k, n, block, max_vector_width);
  m.launch.block = {static_cast<uint32_t>(block), 1, 1};
  m.launch.grid = {CeilDivCapped(n / m.vector_width, block, int64_t{d.sms} * 8 * 4), 1, 1};
  m.work_items = n;
  SetTraffic(g, k, n);
  // Each of a thread's elements is an independent load in flight.
  m.load_bytes_in_flight_per_thread *= m.vector_width;
}

// The consecutive elements (4, 2 or 1) a thread of a transpose tile of `threads` threads
// loads along the p run and stores along q_dim at once: a vector stays within one row of
// the operand's minor-most dimension and of q_dim, whose sizes the width divides, and within
// the thread's share of a tile, and that many elements of every full-size buffer fit one
// kMaxVectorBytes access.
int TileVectorWidth(const Graph& g, const KernelSpec& k, int transpose, const TransposeTiles& tiles,
                    int64_t threads) {
  const int64_t operand_minor = g.nodes[transpose].shape.dims[tiles.p_dims.back()];
  const int64_t widest = WidestBufferElement(g, k, g.nodes[k.outputs[0]].shape.elements());
  for (int v = 4; v > 1; v /= 2) {
    if (operand_minor % v == 0 && tiles.q % v == 0 && v * widest <= kMaxVectorBytes &&
        kTransposeTileElements % (threads * v) == 0) {
      return v;
    }
  }
  return 1;
}

// A loop kernel that reads `transpose` through shared memory tiles: 256 threads a block, each
// with TileVectorWidth's elements of a tile row per access. Both halves of a tile are
// coalesced, so nothing is strided; two block barriers per tile.
void ScheduleTransposeTile(const Graph& g, KernelSpec& k, const GpuDevice& d, int transpose) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  ThreadMapping& m = k.mapping;
  m = ThreadMapping{};
  m.transpose_tile = transpose;
  const TransposeTiles tiles = TransposeTilesOf(g, transpose);
  constexpr int64_t kThreads = 256;
  m.vector_width = TileVectorWidth(g, k, transpose, tiles, kThreads);
  m.launch.block = {static_cast<uint32_t>(kThreads), 1, 1};
  m.launch.grid = {CeilDivCapped(tiles.count(), 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  m.work_items = tiles.count();
  m.block_barriers_per_item = 2;
  for (int o : k.outputs) {
    const int64_t bytes = g.nodes[o].shape.dtype == DType::kF64 ? 8 : 4;
    m.shared_bytes += static_cast<uint32_t>(tiles.q_side * (tiles.p_side + 1) * bytes);
  }
  SetTraffic(g, k, n);
  m.strided_input_bytes = m.strided_sector_bytes = m.strided_reuse_bytes = 0;
  // A thread loads its elements of the tile (one per warp-wide row it takes) together.
  m.load_bytes_in_flight_per_thread *= kTransposeTileElements / kThreads;
}

// A loop kernel of its own: the grid-stride loop runs any grid, so the block size, vector
// width and grid are the cheapest of a few by the cost model. A grid capped at a few waves
// keeps blocks resident across passes, but when the passes do not divide evenly among its
// blocks half of them run an extra pass; a grid of one pass per block has only the last
// wave's tail, and narrower vectors make more, smaller blocks that even the waves out.
void ScheduleStandaloneLoop(const Graph& g, KernelSpec& k, const GpuDevice& d) {
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(d, kPlanningCostModel);
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  ScheduleLoop(g, k, d);
  double best = model->EstimateKernel(g, k).seconds;
  for (const auto& [threads, width] : {std::pair{128, 8}, {128, 4}, {128, 2}, {256, 8}, {256, 4}}) {
    KernelSpec trial = k;
    ScheduleLoop(g, trial, d, threads, width);
    const int64_t blocks = CeilDiv(n, int64_t{threads} * trial.mapping.vector_width);
    if (blocks > std::numeric_limits<int32_t>::max()) continue;
    trial.mapping.launch.grid = {static_cast<uint32_t>(std::max<int64_t>(blocks, 1)), 1, 1};
    const double seconds = model->EstimateKernel(g, trial).seconds;
    if (seconds < best) {
      best = seconds;
      k = std::move(trial);
    }
  }
  // A transposed read goes through shared memory tiles wherever it can. The model takes the
  // rest of a strided sector as an L2 hit when it is used again soon enough, as it is for
  // every suite row, but a warp's strided load still moves a sector per lane from L2 (suite
  // row #24 ran at 0.49x torch.compile on the H100 with its input read that way).
  if (const int transpose = TileableTranspose(g, k); transpose >= 0) {
    ScheduleTransposeTile(g, k, d, transpose);
  }
}

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

// Sets how many reduced elements a reduction kernel's thread loads before combining them:
// up to 4, as many as it has per row (or chunk), each an independent load in flight.
void SetLoadsPerStep(const Graph& g, KernelSpec& k) {
  ThreadMapping& m = k.mapping;
  const ReduceSpan span = SpanOf(g, k);
  const int64_t chunk = CeilDiv(span.reduced, std::max(m.reduce_chunks, 1));
  const int64_t per_thread = CeilDiv(chunk, std::max<int64_t>(span.threads, 1));
  const int loads = per_thread >= 4 ? 4 : per_thread >= 2 ? 2 : 1;
  m.load_bytes_in_flight_per_thread =
      m.load_bytes_in_flight_per_thread / std::max(m.loads_per_step, 1) * loads;
  m.loads_per_step = loads;
}

void ScheduleRowReduce(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0) {
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
  SetTraffic(g, k, rows * row_len);
  SetLoadsPerStep(g, k);
}

void ScheduleColumnReduce(const Graph& g, KernelSpec& k, const GpuDevice& d,
                          int block_threads = 0) {
  const Node& h = g.nodes[k.hero];
  const int64_t kept = h.shape.elements();
  const int64_t reduced = kept > 0 ? g.nodes[h.operands[0]].shape.elements() / kept : 0;
  ThreadMapping& m = k.mapping;
  const int64_t tiles = (kept + 31) / 32;
  // Few tiles: taller blocks so each SM still gets enough threads to hide latency.
  m.column_tile_y = (tiles < int64_t{d.sms} * 4 && reduced >= 256) ? 32 : 8;
  if (block_threads > 0) m.column_tile_y = block_threads / 32;
  m.launch.block = {32, static_cast<uint32_t>(m.column_tile_y), 1};
  m.launch.grid = {CeilDivCapped(tiles, 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  m.shared_bytes = static_cast<uint32_t>(8 * 32 * m.column_tile_y * k.outputs.size());
  m.block_barriers_per_item = 2;
  m.work_items = tiles;
  SetTraffic(g, k, kept * reduced);
  SetLoadsPerStep(g, k);
}

// Bytes of one partial value of each of `reduces` (reduce.h's PartialArrays): its
// accumulator type, at least 4 bytes (f16 and bf16 accumulate in f32).
int64_t PartialBytes(const Graph& g, const std::vector<int>& reduces) {
  int64_t bytes = 0;
  for (int r : reduces) bytes += std::max<int64_t>(DTypeBytes(g.nodes[r].shape.dtype), 4);
  return bytes;
}

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

// How far above the best issue-aware price a row mapping chosen on memory alone must be
// priced before the issue term overrules it: the estimate's error on the suite's row
// kernels is within about a quarter.
constexpr double kIssueOverruleRatio = 1.25;

// The planning version's constants with the fitted issue term, which only a measurement
// gives (the datasheet version has none; devices without a fit keep none).
CostModelParameters WithFittedIssueTerm(const GpuDevice& d) {
  CostModelParameters p = CostModelParametersFor(d, kPlanningCostModel);
  const CostModelParameters fitted = CostModelParametersFor(d, kCurrentCostModel);
  p.issue_seconds = fitted.issue_seconds;
  p.dependent_issue_seconds = fitted.dependent_issue_seconds;
  return p;
}

// Fills a row-stitched mapping with `threads_per_row` threads per row. Returns false when
// the kernel has column reduces and a thread cannot keep fixed columns in registers.
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

Status ScheduleRowStitch(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads = 0) {
  STITCH_ASSIGN_OR_RETURN(RowStitchLayout layout, AnalyzeRowStitch(g, k));
  if (!layout.column_reduces.empty() && block_threads == 0) {
    return InvalidArgument("kernel " + k.name +
                           ": column reduces of rows run only as a phase of a global_stitch "
                           "kernel");
  }
  const int64_t row_len = layout.geometry.row_len;
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
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(d, kPlanningCostModel);
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

// The reduces a split reduce phase computes: its reduce outputs.
std::vector<int> ReduceOutputs(const Graph& g, const KernelSpec& k) {
  std::vector<int> reduces;
  for (int o : k.outputs) {
    if (g.nodes[o].op == OpCode::kReduce) reduces.push_back(o);
  }
  return reduces;
}

// Schedules a phase of a global kernel for blocks of `threads` threads.
Status SchedulePhase(const Graph& g, KernelSpec& k, const GpuDevice& d, int threads) {
  k.mapping = ThreadMapping{};
  switch (k.kind) {
    case KernelKind::kLoop:
      ScheduleLoop(g, k, d, threads);
      return Status::Ok();
    case KernelKind::kRowReduce:
      ScheduleRowReduce(g, k, d, threads);
      return Status::Ok();
    case KernelKind::kColumnReduce:
      ScheduleColumnReduce(g, k, d, threads);
      return Status::Ok();
    case KernelKind::kRowStitch:
      return ScheduleRowStitch(g, k, d, threads);
    case KernelKind::kGlobalStitch:
      break;
  }
  return InvalidArgument("kernel " + k.name + ": a phase cannot be a global_stitch kernel");
}

// Returns whether a reduce phase can split its reduced elements over several blocks: column
// reduces, and row reduces that give a row a whole block.
bool SplittableReduce(const KernelSpec& k) {
  return k.kind == KernelKind::kColumnReduce ||
         (k.kind == KernelKind::kRowReduce && k.mapping.threads_per_row > 32);
}

// Returns the most chunks the reduced elements of a splittable reduce phase can be split
// into while each chunk still gives every thread of the block a few elements; 1 for any
// other phase.
int64_t MaxReduceChunks(const Graph& g, const KernelSpec& k) {
  if (!SplittableReduce(k)) return 1;
  const ThreadMapping& m = k.mapping;
  const Node& h = g.nodes[k.hero];
  const int64_t kept = h.shape.elements();
  const int64_t reduced = kept > 0 ? g.nodes[h.operands[0]].shape.elements() / kept : 0;
  const bool column = k.kind == KernelKind::kColumnReduce;
  const int64_t min_chunk = column ? int64_t{m.column_tile_y} * 4 : int64_t{m.threads_per_row} * 4;
  return std::max<int64_t>(1, reduced / std::max<int64_t>(min_chunk, 1));
}

// The share of a phase's reduced elements its busiest block walks when `items` rows or
// tiles are split into `chunks` chunks over `blocks` blocks: ceil(items * chunks / blocks)
// work items of 1/chunks each.
double BusiestBlockShare(int64_t items, int64_t blocks, int64_t chunks) {
  return static_cast<double>(CeilDiv(items * chunks, blocks)) / static_cast<double>(chunks);
}

// How far above the least busiest-block share a chunk count may leave its phase.
constexpr double kBusiestShareSlack = 1.05;

// Returns `chosen`, or the fewest chunks that give the busiest block a share within
// kBusiestShareSlack of the least any count up to `max_chunks` gives, where `chosen` leaves
// it further above. The cost model prices a phase by the bytes its resident blocks keep in
// flight, as though each had a work item; a block without one only waits at the next grid
// barrier. On the H100, #18's column phase split 2 tiles into 128 chunks for a 528-block
// grid: half the grid waited, the kernel spent 60% of its warp time at the barrier, and the
// phase read at 1.8 TB/s.
int64_t GridFillingChunks(int64_t items, int64_t blocks, int64_t max_chunks, int64_t chosen) {
  if (items <= 0 || blocks <= 0) return chosen;
  // blocks / gcd(items, blocks) chunks give every block the same share, the least there is,
  // so no count past `blocks` needs trying.
  const int64_t limit = std::min(max_chunks, blocks);
  double least = BusiestBlockShare(items, blocks, 1);
  for (int64_t c = 2; c <= limit; ++c) {
    least = std::min(least, BusiestBlockShare(items, blocks, c));
  }
  const double bound = least * kBusiestShareSlack;
  if (BusiestBlockShare(items, blocks, chosen) <= bound) return chosen;
  for (int64_t c = 1; c <= limit; ++c) {
    if (BusiestBlockShare(items, blocks, c) <= bound) return c;
  }
  return chosen;
}

// Splits the reduced elements of a reduce phase into chunks when its rows or tiles alone
// would leave blocks of the grid idle: the cost model picks the chunk count, and
// GridFillingChunks raises it where it leaves the busiest block well above its share.
void SplitReducePhase(const Graph& g, KernelSpec& k, const CostModel& model) {
  if (!SplittableReduce(k)) return;
  ThreadMapping& m = k.mapping;
  const bool column = k.kind == KernelKind::kColumnReduce;
  const Node& h = g.nodes[k.hero];
  const int64_t kept = h.shape.elements();
  const int64_t items = column ? (kept + 31) / 32 : kept;
  const int64_t blocks = static_cast<int64_t>(m.launch.blocks());
  const int64_t max_chunks = MaxReduceChunks(g, k);
  const ThreadMapping unsplit = m;
  // The partials are written once and read back once, behind one more grid barrier.
  auto split = [&](int64_t chunks) {
    m = unsplit;
    if (chunks == 1) return;
    m.reduce_chunks = static_cast<int>(chunks);
    m.work_items = items * chunks;
    m.grid_barriers += 1;
    const int64_t partials = Sectors(PartialBytes(g, ReduceOutputs(g, k)) * kept * chunks);
    m.bytes_stored += partials;
    m.bytes_loaded += partials;
    SetLoadsPerStep(g, k);
  };
  double best = model.EstimateKernel(g, k).seconds;
  int64_t best_chunks = 1;
  for (int64_t c = 2; c <= max_chunks && items * (c / 2) < blocks * 2; c *= 2) {
    split(c);
    const double seconds = model.EstimateKernel(g, k).seconds;
    if (seconds < best) {
      best = seconds;
      best_chunks = c;
    }
  }
  split(GridFillingChunks(items, blocks, max_chunks, best_chunks));
}

// How a global kernel's grid is sized: to its work (the smallest grid that gives every
// phase all the blocks it can use: a splittable reduce, its rows or tiles times its most
// chunks), or to the co-residency bound. Both are capped by co-residency.
enum class GridSizing { kWork, kCoResident };

// Fills a global kernel's mapping for blocks of `threads` threads and a grid sized by
// `sizing`; returns false when no grid of that block size can be co-resident.
bool FillGlobalStitch(const Graph& g, KernelSpec& k, const GpuDevice& d, int threads,
                      GridSizing sizing, const CostModel& model) {
  ThreadMapping& m = k.mapping;
  m = ThreadMapping{};
  m.launch.block = {static_cast<uint32_t>(threads), 1, 1};
  int64_t wanted = 1;
  for (KernelSpec& phase : k.phases) {
    if (!SchedulePhase(g, phase, d, threads).ok()) return false;
    m.shared_bytes += phase.mapping.shared_bytes;
    m.registers_per_thread = std::max(m.registers_per_thread, phase.mapping.registers_per_thread);
    const int64_t blocks = static_cast<int64_t>(phase.mapping.launch.blocks());
    const int64_t chunks = MaxReduceChunks(g, phase);
    const int64_t usable = blocks > std::numeric_limits<int64_t>::max() / chunks
                               ? std::numeric_limits<int64_t>::max()
                               : blocks * chunks;
    wanted = std::max(wanted, usable);
  }
  const int resident = ResidentBlocksPerSm(d, m);
  if (resident == 0) return false;
  // The co-residency bound: every block of the grid is resident at once, so the barriers
  // cannot wait on a block that has not started.
  if (sizing == GridSizing::kCoResident) wanted = std::numeric_limits<int64_t>::max();
  int64_t grid = std::min<int64_t>(CoResidentBlocks(d, m), std::max<int64_t>(wanted, 1));
  if (d.max_persistent_grid_blocks > 0) grid = std::min(grid, d.max_persistent_grid_blocks);
  m.launch.grid = {static_cast<uint32_t>(grid), 1, 1};
  m.grid_barriers = static_cast<int>(k.phases.size()) - 1;
  int in_flight = 1;
  for (KernelSpec& phase : k.phases) {
    phase.mapping.launch.grid = m.launch.grid;
    // Phases are priced with the kernel's resources, which set their residency.
    const uint32_t own_shared = phase.mapping.shared_bytes;
    const int own_registers = phase.mapping.registers_per_thread;
    phase.mapping.shared_bytes = m.shared_bytes;
    phase.mapping.registers_per_thread = m.registers_per_thread;
    SplitReducePhase(g, phase, model);
    if (phase.kind == KernelKind::kRowStitch) AddColumnPartials(g, phase);
    phase.mapping.shared_bytes = own_shared;
    phase.mapping.registers_per_thread = own_registers;
    m.grid_barriers += phase.mapping.grid_barriers;
    m.bytes_loaded += phase.mapping.bytes_loaded;
    m.bytes_stored += phase.mapping.bytes_stored;
    m.work_items += phase.mapping.work_items;
    in_flight = std::max(in_flight, phase.mapping.load_bytes_in_flight_per_thread);
  }
  m.load_bytes_in_flight_per_thread = in_flight;
  return true;
}

Status ScheduleGlobalStitch(const Graph& g, KernelSpec& k, const GpuDevice& d) {
  if (k.phases.empty()) return InvalidArgument("kernel " + k.name + " has no phases");
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(d, kPlanningCostModel);
  double best = std::numeric_limits<double>::infinity();
  int best_threads = 0;
  for (int threads : {256, 512, 1024}) {
    KernelSpec trial = k;
    if (!FillGlobalStitch(g, trial, d, threads, GridSizing::kCoResident, *model)) continue;
    const double s = model->EstimateKernel(g, trial).seconds;
    if (s < best) {
      best = s;
      best_threads = threads;
    }
  }
  if (best_threads == 0 ||
      !FillGlobalStitch(g, k, d, best_threads, GridSizing::kCoResident, *model)) {
    return ResourceExhausted("kernel " + k.name + ": no co-resident grid fits " + d.name);
  }
  return Status::Ok();
}

}  // namespace

Status ScheduleKernel(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.outputs.empty()) return InvalidArgument("kernel " + kernel.name + " has no outputs");
  const int n = static_cast<int>(g.nodes.size());
  if (kernel.kind != KernelKind::kLoop && kernel.kind != KernelKind::kGlobalStitch &&
      (kernel.hero < 0 || kernel.hero >= n || g.nodes[kernel.hero].op != OpCode::kReduce)) {
    return InvalidArgument("kernel " + kernel.name + ": the hero is not a reduce node");
  }
  switch (kernel.kind) {
    case KernelKind::kLoop:
      ScheduleStandaloneLoop(g, kernel, device);
      return Status::Ok();
    case KernelKind::kRowReduce:
      ScheduleRowReduce(g, kernel, device);
      return Status::Ok();
    case KernelKind::kColumnReduce:
      ScheduleColumnReduce(g, kernel, device);
      return Status::Ok();
    case KernelKind::kRowStitch:
      return ScheduleRowStitch(g, kernel, device);
    case KernelKind::kGlobalStitch:
      return ScheduleGlobalStitch(g, kernel, device);
  }
  return InvalidArgument("kernel " + kernel.name + " has an unknown kind");
}

void SizeGridToWork(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.kind != KernelKind::kGlobalStitch) return;
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device, kPlanningCostModel);
  KernelSpec trial = kernel;
  const int threads = static_cast<int>(kernel.mapping.launch.block_threads());
  if (!FillGlobalStitch(g, trial, device, threads, GridSizing::kWork, *model)) return;
  // Equal up to rounding: the phase terms are summed over different grids.
  constexpr double kRelativeTie = 1e-4;
  if (model->EstimateKernel(g, trial).seconds <=
      model->EstimateKernel(g, kernel).seconds * (1 + kRelativeTie)) {
    kernel = std::move(trial);
  }
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

namespace {

// Instructions a thread of a loop kernel issues per pass (a vector of `width` elements),
// estimated as EstimatedPassInstructions does for row mappings: about two per load, store
// and cheap op, a dozen per costly one. Values smaller than the output (per-column ones) are
// computed with every element unless the thread keeps to its columns, when they are
// computed once before its loop and left out.
int EstimatedLoopInstructions(const Graph& g, const KernelSpec& k, bool keeps_columns) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  int64_t per_element = 2 * static_cast<int64_t>(k.outputs.size());
  for (int i : k.inputs) {
    if (g.nodes[i].shape.elements() == n || !keeps_columns) per_element += 2;
  }
  for (int id : k.nodes) {
    const Node& node = g.nodes[id];
    if (ClassOf(node.op) != OpClass::kElementwise) continue;
    if (node.shape.elements() == n || !keeps_columns) {
      per_element += CostOf(node.op) == OpCost::kCostly ? 12 : 2;
    }
  }
  const int64_t total = per_element * std::max(k.mapping.vector_width, 1);
  return static_cast<int>(std::min<int64_t>(total, std::numeric_limits<int>::max()));
}

// What a loop kernel's broadcasts to its output's shape read per column.
struct LoopColumns {
  // The elements over which every such broadcast repeats: the product of the output's
  // dimensions from the outermost one a broadcast keeps (the channel of a [N, H, W, C] batch
  // norm: C). 0 where no broadcast keeps only inner dimensions (none at all, only scalars,
  // or one that keeps the outermost dimension).
  int64_t period = 0;
  // The distinct values broadcast that keep some dimension (a scalar's is the same
  // everywhere): what a thread that keeps to its columns holds across its loop.
  std::set<int> values;
};

LoopColumns AnalyzeLoopColumns(const Graph& g, const KernelSpec& k) {
  const std::vector<int64_t>& dims = g.nodes[k.outputs[0]].shape.dims;
  LoopColumns columns;
  int first_kept = static_cast<int>(dims.size());
  for (int id : k.nodes) {
    const Node& n = g.nodes[id];
    if (n.op != OpCode::kBroadcast || n.shape.dims != dims) continue;
    const std::vector<int64_t>& in = g.nodes[n.operands[0]].shape.dims;
    for (size_t i = 0; i < in.size() && i < n.dimensions.size(); ++i) {
      if (in[i] != 1) first_kept = std::min(first_kept, static_cast<int>(n.dimensions[i]));
    }
    if (g.nodes[n.operands[0]].shape.elements() > 1) columns.values.insert(n.operands[0]);
  }
  if (first_kept <= 0 || first_kept >= static_cast<int>(dims.size())) return columns;
  columns.period = 1;
  for (size_t d = static_cast<size_t>(first_kept); d < dims.size(); ++d) {
    columns.period *= dims[d];
  }
  return columns;
}

}  // namespace

void KeepLoopColumnsPerThread(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  const ThreadMapping& m = kernel.mapping;
  if (kernel.kind != KernelKind::kLoop || m.transpose_tile >= 0 || m.column_period > 0) return;
  const LoopColumns columns = AnalyzeLoopColumns(g, kernel);
  const int64_t period = columns.period;
  const int64_t width = std::max(m.vector_width, 1);
  if (period == 0 || period % width != 0) return;
  const int64_t vectors = g.nodes[kernel.outputs[0]].shape.elements() / width;
  const int64_t threads = static_cast<int64_t>(m.launch.block_threads());
  // The grid's threads must be a multiple of a period's vectors.
  const int64_t period_vectors = period / width;
  const int64_t grid_step = period_vectors / std::gcd(period_vectors, threads);
  // Each thread holds every per-column value for each lane of its vector across the loop.
  ThreadMapping kept = m;
  kept.column_period = period;
  kept.registers_per_thread =
      std::min<int>(device.max_registers_per_thread,
                    m.registers_per_thread + static_cast<int>(width * columns.values.size()));
  const int64_t resident = int64_t{ResidentBlocksPerSm(device, kept)} * device.sms;
  // What keeping the columns saves is instructions, which only the issue term prices; it
  // costs occupancy (the values' registers) and a grid of a few waves.
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device, WithFittedIssueTerm(device));
  KernelSpec scheduled = kernel;
  scheduled.mapping.estimated_instructions = EstimatedLoopInstructions(g, kernel, false);
  kept.estimated_instructions = EstimatedLoopInstructions(g, kernel, true);
  double best_seconds = model->EstimateKernel(g, scheduled).seconds;
  std::optional<KernelSpec> best;
  for (int64_t waves : {1, 2, 4}) {
    const int64_t grid = resident * waves / grid_step * grid_step;
    if (grid < grid_step || grid * threads * 2 > vectors) continue;
    KernelSpec trial = kernel;
    trial.mapping = kept;
    trial.mapping.launch.grid = {static_cast<uint32_t>(grid), 1, 1};
    const double seconds = model->EstimateKernel(g, trial).seconds;
    if (seconds < best_seconds) {  // the fewest waves at a tie
      best_seconds = seconds;
      best = std::move(trial);
    }
  }
  if (best) {
    kernel = std::move(*best);
    kernel.mapping.estimated_instructions = 0;  // a shipped plan's prices read the cubin's
  }
}

namespace {

// Records the block holding work item `last` of a loop whose item i runs in block
// (i / per_block) % grid, and the block after it.
void AddBoundary(int64_t items, int64_t per_block, uint64_t grid, std::vector<uint64_t>& out) {
  if (items <= 0 || per_block <= 0 || grid == 0) return;
  const uint64_t last = static_cast<uint64_t>((items - 1) / per_block) % grid;
  out.push_back(last);
  out.push_back((last + 1) % grid);
}

// The combine stage of a split reduction (reduction.h): a warp per kept output, numbered
// across the grid.
void AddCombineBoundary(int64_t kept, const ThreadMapping& m, std::vector<uint64_t>& out) {
  const int64_t warps_per_block =
      std::max<int64_t>(1, static_cast<int64_t>(m.launch.block_threads()) / 32);
  const int64_t warps = warps_per_block * static_cast<int64_t>(m.launch.blocks());
  if (kept <= 0) return;
  const int64_t last_warp = (kept - 1) % warps;
  out.push_back(static_cast<uint64_t>(last_warp / warps_per_block));
  out.push_back(static_cast<uint64_t>((last_warp / warps_per_block + 1) % m.launch.blocks()));
}

void AddRowStitchBoundaries(const Graph& g, const KernelSpec& k, std::vector<uint64_t>& out) {
  StatusOr<RowStitchLayout> layout = AnalyzeRowStitch(g, k);
  if (!layout.ok()) return;
  const ThreadMapping& m = k.mapping;
  const uint64_t grid = m.launch.blocks();
  const int64_t threads = static_cast<int64_t>(m.launch.block_threads());
  for (int o : layout->independent_outputs) {
    AddBoundary(g.nodes[o].shape.elements(), threads, grid, out);
  }
  const int64_t rows = layout->geometry.rows;
  if (m.threads_per_row <= 32) {
    const int64_t rows_per_warp = 32 / m.threads_per_row;
    AddBoundary(CeilDiv(rows, rows_per_warp), m.launch.block[1], grid, out);
  } else {
    AddBoundary(rows, 1, grid, out);
  }
  if (!layout->column_reduces.empty()) AddCombineBoundary(layout->geometry.row_len, m, out);
}

void AddBoundaries(const Graph& g, const KernelSpec& k, std::vector<uint64_t>& out) {
  const ThreadMapping& m = k.mapping;
  const uint64_t grid = m.launch.blocks();
  const int64_t chunks = std::max(m.reduce_chunks, 1);
  switch (k.kind) {
    case KernelKind::kLoop: {
      if (m.transpose_tile >= 0) {
        AddBoundary(m.work_items, 1, grid, out);
        return;
      }
      const int64_t n = g.nodes[k.outputs[0]].shape.elements();
      AddBoundary(n / std::max(m.vector_width, 1), static_cast<int64_t>(m.launch.block_threads()),
                  grid, out);
      return;
    }
    case KernelKind::kRowReduce:
    case KernelKind::kColumnReduce: {
      const int64_t kept = g.nodes[k.hero].shape.elements();
      if (k.kind == KernelKind::kColumnReduce) {
        AddBoundary(CeilDiv(kept, int64_t{32}) * chunks, 1, grid, out);
      } else if (m.threads_per_row <= 32) {
        AddBoundary(CeilDiv(kept, int64_t{32 / m.threads_per_row}), m.launch.block[1], grid, out);
      } else {
        AddBoundary(kept * chunks, 1, grid, out);
      }
      if (chunks > 1) AddCombineBoundary(kept, m, out);
      return;
    }
    case KernelKind::kRowStitch:
      AddRowStitchBoundaries(g, k, out);
      return;
    case KernelKind::kGlobalStitch:
      for (const KernelSpec& phase : k.phases) AddBoundaries(g, phase, out);
      return;
  }
}

}  // namespace

int64_t ItemsPerPass(KernelKind kind, const ThreadMapping& m) {
  switch (kind) {
    case KernelKind::kLoop:
      // A block takes one transpose tile per pass, or each thread one vector of
      // `vector_width` elements.
      if (m.transpose_tile >= 0) return 1;
      return static_cast<int64_t>(m.launch.block_threads()) * std::max(m.vector_width, 1);
    case KernelKind::kRowReduce:
    case KernelKind::kRowStitch:
      // Rows side by side in a block (several per warp, a warp each, or one per block).
      return std::max(m.rows_per_block, 1);
    case KernelKind::kColumnReduce:
      // A 32 x column_tile_y block owns one tile of 32 kept columns at a time.
      return 1;
    case KernelKind::kGlobalStitch:
      return 1;  // priced phase by phase
  }
  return 1;
}

TransposeTiles TransposeTilesOf(const Graph& g, int transpose) {
  const Node& t = g.nodes[transpose];
  const int rank = t.shape.rank();
  TransposeTiles tiles;
  if (rank < 2) return tiles;
  tiles.q_dim = rank - 1;
  tiles.q = t.shape.dims[tiles.q_dim];
  tiles.p = 1;
  for (int64_t operand_dim = t.dimensions[tiles.q_dim] + 1; operand_dim < rank; ++operand_dim) {
    const auto at = std::find(t.dimensions.begin(), t.dimensions.end(), operand_dim);
    tiles.p_dims.push_back(static_cast<int>(at - t.dimensions.begin()));
    tiles.p *= t.shape.dims[tiles.p_dims.back()];
  }
  tiles.p_side = tiles.p >= 32 ? 32 : tiles.p > 8 ? 16 : 8;
  tiles.q_side = kTransposeTileElements / tiles.p_side;
  tiles.tiles_p = CeilDiv(tiles.p, tiles.p_side);
  tiles.tiles_q = CeilDiv(tiles.q, tiles.q_side);
  tiles.batch = tiles.p * tiles.q > 0 ? t.shape.elements() / (tiles.p * tiles.q) : 0;
  return tiles;
}

std::vector<uint64_t> BoundaryBlocks(const Graph& g, const KernelSpec& kernel) {
  std::vector<uint64_t> blocks;
  AddBoundaries(g, kernel, blocks);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

Status SchedulePlan(const Graph& g, FusionPlan& plan, const GpuDevice& device) {
  for (KernelSpec& k : plan.kernels) STITCH_RETURN_IF_ERROR(ScheduleKernel(g, k, device));
  return Status::Ok();
}

}  // namespace stitch
