// Loop kernels: block size, vector width and grid; transpose tiles; per-column values kept
// per thread.
#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "int_math.h"
#include "schedule_internal.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/op_classes.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace internal {
namespace {

// The transpose a loop kernel can stage through shared memory tiles (ThreadMapping::
// transpose_tile), or -1: its transpose that moves the minor-most dimension (or the first of
// several alike, whose outputs the tile's threads compute along the same operand order), with
// outputs of the transpose's element count, of any type (shared memory holds their compute
// type), side lengths that fill most of a tile, and every full-size input read through one
// of them or by a side output (IsTileSideOutput), which the tile computes in the operand's
// order too. An input read in output order would be strided instead while the tile is
// computed.
int TileableTranspose(const Graph& g, const KernelSpec& k) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  const int found = StageableTranspose(g, k, n, /*alike=*/true);
  if (found < 0) return -1;
  const TransposeTiles tiles = TransposeTilesOf(g, found);
  if (tiles.p < 8 || tiles.q < 16) return -1;
  for (int o : k.outputs) {
    if (g.nodes[o].shape.elements() != n) return -1;
  }
  return found;
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

}  // namespace

void ScheduleLoop(const Graph& g, KernelSpec& k, const GpuDevice& d, int block_threads,
                  int max_vector_width) {
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

namespace {

// The consecutive elements (4, 2 or 1) a thread of a transpose tile of `tile_elements`
// elements and `threads` threads loads along the p run and stores along q_dim at once: a
// vector stays within one row of the operand's minor-most dimension and of q_dim, whose
// sizes the width divides, the block covers the tile in whole rows of vectors
// (TransposeTileFits), and that many elements of every full-size buffer fit one
// kMaxVectorBytes access.
int TileVectorWidth(const Graph& g, const KernelSpec& k, int transpose, int64_t threads,
                    int64_t tile_elements) {
  const TransposeTiles tiles = TransposeTilesOf(g, transpose, tile_elements);
  const int64_t operand_minor = g.nodes[transpose].shape.dims[tiles.p_dims.back()];
  const int64_t widest = WidestBufferElement(g, k, g.nodes[k.outputs[0]].shape.elements());
  for (int v = 4; v > 1; v /= 2) {
    if (operand_minor % v == 0 && tiles.q % v == 0 && v * widest <= kMaxVectorBytes &&
        TransposeTileFits(tiles, threads, v)) {
      return v;
    }
  }
  return 1;
}

// The threads of a transpose tile's block as ScheduleKernel plans it.
constexpr int64_t kTransposeTileThreads = 256;

// A loop kernel that reads `transpose` through shared memory tiles of `tile_elements`
// elements: `threads` a block (256 as scheduled), each with TileVectorWidth's elements of a
// tile row per access, and as many such vectors of each tile as the block leaves it
// (loads_per_step). Both halves of a tile are coalesced, so nothing is strided; two block
// barriers per tile. False, with `k` unchanged, where the block cannot cover a tile in whole
// rows of vectors both ways (the emitter's condition).
bool ScheduleTransposeTile(const Graph& g, KernelSpec& k, const GpuDevice& d, int transpose,
                           int64_t threads = kTransposeTileThreads,
                           int64_t tile_elements = kTransposeTileElements) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  const int width = TileVectorWidth(g, k, transpose, threads, tile_elements);
  const TransposeTiles tiles = TransposeTilesOf(g, transpose, tile_elements);
  if (!TransposeTileFits(tiles, threads, width)) return false;
  const int64_t loads = tile_elements / (threads * width);
  ThreadMapping& m = k.mapping;
  m = ThreadMapping{};
  m.transpose_tile = transpose;
  m.vector_width = width;
  m.loads_per_step = static_cast<int>(loads);
  m.launch.block = {static_cast<uint32_t>(threads), 1, 1};
  m.launch.grid = {CeilDivCapped(tiles.count(), 1, int64_t{d.sms} * kMaxBlocksPerSm), 1, 1};
  m.work_items = tiles.count();
  m.block_barriers_per_item = 2;
  for (int o : k.outputs) {
    if (IsTileSideOutput(g, k, o)) continue;  // written as computed, not through the tile
    // A slot holds the output's compute type: f32 for the half types, and at most 8 bytes.
    const int64_t bytes = DTypeBytes(g.nodes[o].shape.dtype) == 8 ? 8 : 4;
    m.shared_bytes += static_cast<uint32_t>(tiles.q_side * (tiles.p_side + 1) * bytes);
  }
  SetTraffic(g, k, n);
  m.strided_input_bytes = m.strided_sector_bytes = m.strided_reuse_bytes = 0;
  // A thread loads its elements of the tile (one per warp-wide row it takes) together.
  m.load_bytes_in_flight_per_thread *= static_cast<int>(tiles.p_side * tiles.q_side / threads);
  return true;
}

}  // namespace

// The passes of a loop kernel's grid-stride loop that its busiest SM runs, over the mean of
// the SMs that run any: blocks, and the passes of a capped grid's blocks, are dealt to the SMs
// evenly, so the busiest runs ceil(passes / SMs) where the mean is passes / SMs. 1 when
// every pass has an SM of its own.
double BusiestSmShare(const Graph& g, const KernelSpec& k, const GpuDevice& d) {
  const ThreadMapping& m = k.mapping;
  const int64_t per_pass = ItemsPerPass(KernelKind::kLoop, m);
  const int64_t passes = CeilDiv(g.nodes[k.outputs[0]].shape.elements(), per_pass);
  const int64_t sms = std::max(d.sms, 1);
  if (passes <= sms) return 1.0;
  return static_cast<double>(CeilDiv(passes, sms) * sms) / static_cast<double>(passes);
}

// A loop kernel of its own: the grid-stride loop runs any grid, so the block size, vector
// width and grid are the cheapest of a few by the cost model. A grid capped at a few waves
// keeps blocks resident across passes, but when the passes do not divide evenly among its
// blocks half of them run an extra pass; a grid of one pass per block has only the last
// wave's tail, and narrower vectors make more, smaller blocks that even the waves out.
//
// The model prices a one-pass grid by its waves of resident blocks, so it ties block sizes
// whose blocks and slots scale together: suite row #30 takes two waves as 1,600 blocks of 256
// threads and as 3,200 of 128. On the GPU the last wave's blocks go to SMs as earlier ones
// finish, and what lengthens the kernel is the busiest SM's share (BusiestSmShare): 13
// blocks against a mean of 12.1 for the 1,600, 25 against 24.2 for the 3,200, 4% apart. In
// each of four H100 runs #30's 128-thread mapping (then its XLA-model plan's) ran 3-5%
// faster than the 256-thread one, so at a tie a share at least 1% more even wins.
void ChooseLoopMapping(const Graph& g, KernelSpec& k, const GpuDevice& d, const CostModel& model) {
  std::vector<KernelSpec> candidates = LoopMappingCandidates(g, k, d);
  k = std::move(candidates.front());
  double best = model.EstimateKernel(g, k).seconds;
  double best_share = BusiestSmShare(g, k, d);
  // Equal up to rounding: the candidates' terms are products of different factors.
  constexpr double kRelativeTie = 1e-9;
  // A share must be this much more even to decide a tie: grids of many passes per SM are
  // all within a few tenths of a percent, where wider vectors and fewer blocks count more.
  constexpr double kShareGain = 1.01;
  for (size_t i = 1; i < candidates.size(); ++i) {
    KernelSpec& trial = candidates[i];
    const double seconds = model.EstimateKernel(g, trial).seconds;
    const double share = BusiestSmShare(g, trial, d);
    // A tie never narrows the vectors: the runs compared shares at one width, and fewer
    // bytes per access cost instructions the planning model does not price.
    const bool tied = seconds <= best * (1 + kRelativeTie) &&
                      trial.mapping.vector_width >= k.mapping.vector_width;
    if (seconds < best * (1 - kRelativeTie) || (tied && share * kShareGain < best_share)) {
      best = std::min(best, seconds);
      best_share = share;
      k = std::move(trial);
    }
  }
}

namespace {

int EstimatedLoopInstructions(const Graph& g, const KernelSpec& k, bool keeps_columns);

// Instructions a transpose tile's cubin has beyond its elements' own: the tile's origin from
// its number (divisions by the tile counts), the loop, both barriers, the shared-memory
// addresses and the prologue, which the cost model's issue term counts with every pass as it
// does for the assembled code. Suite row #24's sm_90 cubins have 88, 128 and 208 instructions
// at one, two and four vectors of four elements a thread: 40 a vector, 48 besides.
constexpr int kTilePassInstructions = 48;

// Instructions a thread of transpose tile mapping `k` issues per tile, estimated as
// EstimatedLoopInstructions does for a plain loop's elements, plus the store of each element
// into the tile and its load back, and the tile's own (kTilePassInstructions).
int EstimatedTileInstructions(const Graph& g, const KernelSpec& k) {
  const ThreadMapping& m = k.mapping;
  const int width = std::max(m.vector_width, 1);
  const int per_element = EstimatedLoopInstructions(g, k, false) / width + 2;
  return kTilePassInstructions + per_element * width * std::max(m.loads_per_step, 1);
}

// Larger tiles give each thread more loads in flight and spread a tile's own instructions
// (kTilePassInstructions) and barriers over more elements, at the cost of shared memory and
// of fewer tiles to spread over the SMs. Tiles of one, two and four times
// kTransposeTileElements are priced with the fitted issue term, as KeepLoopColumnsPerThread
// prices what it saves; a larger tile must be cheaper by kLargerTileMargin, more than the
// instruction estimate's error, so that a launch-bound kernel of few tiles (suite row #24)
// keeps its blocks.
constexpr double kLargerTileMargin = 0.02;

void ChooseTransposeTile(const Graph& g, KernelSpec& k, const GpuDevice& d, int transpose) {
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(d, WithFittedIssueTerm(d));
  std::optional<KernelSpec> best;
  double best_seconds = 0;
  for (int64_t multiple : {1, 2, 4}) {
    KernelSpec trial = k;
    if (!ScheduleTransposeTile(g, trial, d, transpose, kTransposeTileThreads,
                               kTransposeTileElements * multiple)) {
      continue;
    }
    trial.mapping.estimated_instructions = EstimatedTileInstructions(g, trial);
    const double seconds = model->EstimateKernel(g, trial).seconds;
    if (!best || seconds < best_seconds * (1 - kLargerTileMargin)) {
      best_seconds = seconds;
      best = std::move(trial);
    }
  }
  if (!best) return;
  k = std::move(*best);
  k.mapping.estimated_instructions = 0;  // a shipped plan's prices read the cubin's
}

}  // namespace

void ScheduleStandaloneLoop(const Graph& g, KernelSpec& k, const GpuDevice& d) {
  ChooseLoopMapping(g, k, d, *NewPlanningCostModel(d));
  // A transposed read goes through shared memory tiles wherever it can. The model takes the
  // rest of a strided sector as an L2 hit when it is used again soon enough, as it is for
  // every suite row, but a warp's strided load still moves a sector per lane from L2 (suite
  // row #24 ran at 0.49x torch.compile on the H100 with its input read that way).
  if (const int transpose = TileableTranspose(g, k); transpose >= 0) {
    ChooseTransposeTile(g, k, d, transpose);
  }
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
}  // namespace internal

using internal::AnalyzeLoopColumns;
using internal::EstimatedLoopInstructions;
using internal::LoopColumns;
using internal::WithFittedIssueTerm;
using internal::WithMeasuredBlockStarts;

std::vector<KernelSpec> LoopMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                              const GpuDevice& device) {
  std::vector<KernelSpec> candidates;
  KernelSpec fresh = kernel;
  fresh.mapping = ThreadMapping{};
  candidates.push_back(fresh);
  internal::ScheduleLoop(g, candidates.back(), device);
  const int64_t n = g.nodes[kernel.outputs[0]].shape.elements();
  for (const auto& [threads, width] : {std::pair{128, 8}, {128, 4}, {128, 2}, {256, 8}, {256, 4}}) {
    KernelSpec trial = fresh;
    internal::ScheduleLoop(g, trial, device, threads, width);
    const int64_t blocks = CeilDiv(n, int64_t{threads} * trial.mapping.vector_width);
    if (blocks > std::numeric_limits<int32_t>::max()) continue;
    trial.mapping.launch.grid = {static_cast<uint32_t>(std::max<int64_t>(blocks, 1)), 1, 1};
    candidates.push_back(std::move(trial));
  }
  return candidates;
}

std::vector<KernelSpec> TransposeTileMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                       const GpuDevice& device) {
  std::vector<KernelSpec> candidates;
  const int transpose = internal::TileableTranspose(g, kernel);
  if (kernel.kind != KernelKind::kLoop || transpose < 0) return candidates;
  for (int64_t threads :
       {int64_t{64}, int64_t{128}, internal::kTransposeTileThreads, int64_t{512}}) {
    KernelSpec trial = kernel;
    if (internal::ScheduleTransposeTile(g, trial, device, transpose, threads)) {
      candidates.push_back(std::move(trial));
    }
  }
  for (int64_t multiple : {2, 4}) {
    KernelSpec trial = kernel;
    if (internal::ScheduleTransposeTile(g, trial, device, transpose,
                                        internal::kTransposeTileThreads,
                                        kTransposeTileElements * multiple)) {
      candidates.push_back(std::move(trial));
    }
  }
  return candidates;
}

namespace {

// The registers one more vector a step of loop kernel `k` takes: those its loads land in, a
// vector of each full-size input (f16 and bf16 elements two to a register).
int64_t StepVectorRegisters(const Graph& g, const KernelSpec& k) {
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  const int64_t width = std::max(k.mapping.vector_width, 1);
  int64_t bytes = 0;
  for (int in : k.inputs) {
    const Shape& shape = g.nodes[in].shape;
    if (shape.elements() == n) bytes += width * DTypeBytes(shape.dtype);
  }
  return CeilDiv(bytes, int64_t{4});
}

// Loop kernel `k`'s mapping `m` with `per_step` vectors a step (ThreadMapping::loads_per_step):
// the loads a thread keeps in flight, and its registers by the further vectors' loads.
ThreadMapping WithVectorsPerStep(const Graph& g, const KernelSpec& k, ThreadMapping m, int per_step,
                                 const GpuDevice& device) {
  m.loads_per_step = per_step;
  m.load_bytes_in_flight_per_thread *= per_step;
  m.registers_per_thread = static_cast<int>(
      std::min<int64_t>(device.max_registers_per_thread,
                        m.registers_per_thread + (per_step - 1) * StepVectorRegisters(g, k)));
  return m;
}

}  // namespace

std::vector<KernelSpec> KeptColumnsMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                     const GpuDevice& device) {
  std::vector<KernelSpec> candidates;
  const ThreadMapping& m = kernel.mapping;
  if (kernel.kind != KernelKind::kLoop || m.column_period == 0 || m.loads_per_step > 1) {
    return candidates;
  }
  const int64_t n = g.nodes[kernel.outputs[0]].shape.elements();
  const int64_t width = std::max(m.vector_width, 1);
  const int64_t stride = static_cast<int64_t>(m.launch.blocks() * m.launch.block_threads());
  if (stride * width * 2 * 2 > n) return candidates;  // at least two steps a thread
  KernelSpec trial = kernel;
  trial.mapping = WithVectorsPerStep(g, kernel, m, 2, device);
  candidates.push_back(std::move(trial));
  return candidates;
}

void RemapLoopForBlockStarts(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  const ThreadMapping& m = kernel.mapping;
  if (kernel.kind != KernelKind::kLoop || m.transpose_tile >= 0 || m.column_period > 0) return;
  const GpuDevice& planning = PlanningDevice(device);
  internal::ChooseLoopMapping(g, kernel, device,
                              *NewAnalyticalCostModel(planning, WithMeasuredBlockStarts(device)));
}

void KeepLoopColumnsPerThread(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  const ThreadMapping& m = kernel.mapping;
  if (kernel.kind != KernelKind::kLoop || m.transpose_tile >= 0 || m.column_period > 0) return;
  const LoopColumns columns = AnalyzeLoopColumns(g, kernel);
  const int64_t period = columns.period;
  const int64_t width = std::max(m.vector_width, 1);
  if (period == 0 || period % width != 0) return;
  const int64_t n = g.nodes[kernel.outputs[0]].shape.elements();
  const int64_t vectors = n / width;
  const int64_t threads = static_cast<int64_t>(m.launch.block_threads());
  // The grid's threads must be a multiple of a period's vectors.
  const int64_t period_vectors = period / width;
  const int64_t grid_step = period_vectors / std::gcd(period_vectors, threads);
  // What keeping the columns saves is instructions, which only the issue term prices; it
  // costs occupancy (the values' registers) and a grid of a few waves.
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device, WithFittedIssueTerm(device));
  KernelSpec scheduled = kernel;
  scheduled.mapping.estimated_instructions = EstimatedLoopInstructions(g, kernel, false);
  double best_seconds = model->EstimateKernel(g, scheduled).seconds;
  std::optional<KernelSpec> best;
  // A step's vectors lie a grid's stride apart, so they share the thread's columns and their
  // values: a second vector doubles the loads a thread keeps in flight for the registers of
  // its elements alone, where the values' registers have cut occupancy and so the bytes in
  // flight (suite row #19: 55 registers, eight blocks of 128 threads an SM).
  for (int64_t per_step : {1, 2}) {
    // Each thread holds every per-column value for each lane of its vector across the loop.
    ThreadMapping kept = m;
    kept.column_period = period;
    kept.registers_per_thread =
        std::min<int>(device.max_registers_per_thread,
                      m.registers_per_thread + static_cast<int>(width * columns.values.size()));
    kept = WithVectorsPerStep(g, kernel, kept, static_cast<int>(per_step), device);
    kept.estimated_instructions =
        EstimatedLoopInstructions(g, kernel, true) * static_cast<int>(per_step);
    const int64_t resident = int64_t{ResidentBlocksPerSm(device, kept)} * device.sms;
    for (int64_t waves : {1, 2, 4}) {
      const int64_t grid = resident * waves / grid_step * grid_step;
      if (grid < grid_step || grid * threads * 2 * per_step > vectors) continue;
      KernelSpec trial = kernel;
      trial.mapping = kept;
      trial.mapping.launch.grid = {static_cast<uint32_t>(grid), 1, 1};
      const double seconds = model->EstimateKernel(g, trial).seconds;
      if (seconds < best_seconds) {  // the fewest waves and vectors at a tie
        best_seconds = seconds;
        best = std::move(trial);
      }
    }
  }
  if (best) {
    kernel = std::move(*best);
    kernel.mapping.estimated_instructions = 0;  // a shipped plan's prices read the cubin's
  }
}

bool IsTileSideOutput(const Graph& g, const KernelSpec& k, int output) {
  std::vector<int> pending = {output};
  std::set<int> seen;
  while (!pending.empty()) {
    const int id = pending.back();
    pending.pop_back();
    if (!seen.insert(id).second) continue;
    if (std::find(k.nodes.begin(), k.nodes.end(), id) == k.nodes.end()) continue;
    if (MovesMinorDimension(g, id)) return false;
    for (int operand : g.nodes[id].operands) pending.push_back(operand);
  }
  return true;
}

TransposeTiles TransposeTilesOf(const Graph& g, int transpose, int64_t tile_elements) {
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
  tiles.q_side = tile_elements / tiles.p_side;
  tiles.tiles_p = CeilDiv(tiles.p, tiles.p_side);
  tiles.tiles_q = CeilDiv(tiles.q, tiles.q_side);
  tiles.batch = tiles.p * tiles.q > 0 ? t.shape.elements() / (tiles.p * tiles.q) : 0;
  return tiles;
}

int64_t LoopTransposeTileElements(const ThreadMapping& m) {
  return static_cast<int64_t>(m.launch.block_threads()) * std::max(m.vector_width, 1) *
         std::max(m.loads_per_step, 1);
}

TransposeTiles LoopTransposeTilesOf(const Graph& g, const ThreadMapping& m) {
  return TransposeTilesOf(g, m.transpose_tile, LoopTransposeTileElements(m));
}

bool TransposeTileFits(const TransposeTiles& tiles, int64_t threads, int64_t width) {
  if (threads <= 0 || width <= 0 || tiles.p_side % width != 0 || tiles.q_side % width != 0) {
    return false;
  }
  const int64_t along_p = tiles.p_side / width;  // a tile row's vectors as it is computed
  const int64_t along_q = tiles.q_side / width;  // and as it is stored
  return along_p > 0 && along_q > 0 && threads % along_p == 0 && threads % along_q == 0 &&
         tiles.q_side % (threads / along_p) == 0 && tiles.p_side % (threads / along_q) == 0;
}

}  // namespace stitch
