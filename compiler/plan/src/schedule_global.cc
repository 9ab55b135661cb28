// Global kernels: the phases between grid barriers, a co-resident grid, and reduce phases
// split over the grid's blocks.
#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "int_math.h"
#include "schedule_internal.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace internal {

bool SplittableReduce(const KernelSpec& k) {
  return k.kind == KernelKind::kColumnReduce ||
         (k.kind == KernelKind::kRowReduce && k.mapping.threads_per_row > 32);
}

int64_t MaxReduceChunks(const Graph& g, const KernelSpec& k) {
  if (!SplittableReduce(k)) return 1;
  const ThreadMapping& m = k.mapping;
  const Node& h = g.nodes[k.hero];
  const int64_t kept = h.shape.elements();
  const int64_t reduced = kept > 0 ? g.nodes[h.operands[0]].shape.elements() / kept : 0;
  const bool column = k.kind == KernelKind::kColumnReduce;
  // At least four elements a thread, and a whole vector (a row's thread loads vectors of
  // vector_width).
  const int64_t min_chunk = column ? int64_t{m.column_tile_y} * 4
                                   : int64_t{m.threads_per_row} * std::max(m.vector_width, 4);
  return std::max<int64_t>(1, reduced / std::max<int64_t>(min_chunk, 1));
}

namespace {

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
  const int64_t items = column ? CeilDiv(kept, ColumnTileWidth(m)) : kept;
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

}  // namespace

Status ScheduleGlobalStitch(const Graph& g, KernelSpec& k, const GpuDevice& d) {
  if (k.phases.empty()) return InvalidArgument("kernel " + k.name + " has no phases");
  std::unique_ptr<CostModel> model = NewPlanningCostModel(d);
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

}  // namespace internal

using internal::FillGlobalStitch;
using internal::GridSizing;

void SizeGridToWork(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.kind != KernelKind::kGlobalStitch) return;
  std::unique_ptr<CostModel> model = NewPlanningCostModel(device);
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

namespace {

// `kernel` as scheduled, with its grid sized for `registers_per_thread` (where more than it
// counted on: fewer co-resident blocks, the same chunks of each split phase dealt over them)
// and each column phase's lanes keeping `column_lane_bytes` of loads in flight; nothing when
// no block fits.
std::optional<KernelSpec> WithColumnLaneBytes(const Graph& g, const KernelSpec& kernel,
                                              const GpuDevice& device, int registers_per_thread,
                                              int column_lane_bytes) {
  KernelSpec trial = kernel;
  ThreadMapping& m = trial.mapping;
  m.registers_per_thread = std::max(m.registers_per_thread, registers_per_thread);
  if (ResidentBlocksPerSm(device, m) == 0) return std::nullopt;
  const int64_t grid =
      std::min<int64_t>(CoResidentBlocks(device, m), static_cast<int64_t>(m.launch.blocks()));
  m.launch.grid = {static_cast<uint32_t>(std::max<int64_t>(grid, 1)), 1, 1};
  int in_flight = 1;
  for (KernelSpec& phase : trial.phases) {
    phase.mapping.launch.grid = m.launch.grid;
    if (phase.kind == KernelKind::kColumnReduce) {
      internal::SetLoadsPerStep(g, phase, column_lane_bytes);
    }
    in_flight = std::max(in_flight, phase.mapping.load_bytes_in_flight_per_thread);
  }
  m.load_bytes_in_flight_per_thread = in_flight;
  return trial;
}

// `kernel` with each row-reduce phase that loads vectors loading single elements instead, the
// same chunks of each; nothing when no phase loads vectors.
std::optional<KernelSpec> WithSingleElementRowPhases(const Graph& g, const KernelSpec& kernel) {
  KernelSpec trial = kernel;
  bool changed = false;
  int in_flight = 1;
  for (KernelSpec& phase : trial.phases) {
    ThreadMapping& p = phase.mapping;
    if (phase.kind == KernelKind::kRowReduce && p.vector_width > 1) {
      p.load_bytes_in_flight_per_thread /= p.vector_width;
      p.vector_width = 1;
      internal::SetLoadsPerStep(g, phase);
      changed = true;
    }
    in_flight = std::max(in_flight, p.load_bytes_in_flight_per_thread);
  }
  trial.mapping.load_bytes_in_flight_per_thread = in_flight;
  if (!changed) return std::nullopt;
  return trial;
}

// `kernel` with each row-stitch phase whose warps hold their rows in registers prefetching
// their next rows into L2 (ThreadMapping::prefetch_next_rows); nothing when no phase can.
std::optional<KernelSpec> WithPrefetchedRowPhases(const KernelSpec& kernel) {
  KernelSpec trial = kernel;
  bool changed = false;
  for (KernelSpec& phase : trial.phases) {
    ThreadMapping& p = phase.mapping;
    if (phase.kind == KernelKind::kRowStitch && p.warp_rows_in_registers() && !p.staged_row_spans) {
      p.prefetch_next_rows = true;
      changed = true;
    }
  }
  if (!changed) return std::nullopt;
  return trial;
}

}  // namespace

std::vector<KernelSpec> GlobalStitchMappingCandidates(const Graph& g, const KernelSpec& kernel,
                                                      const GpuDevice& device) {
  std::vector<KernelSpec> candidates;
  if (kernel.kind != KernelKind::kGlobalStitch) return candidates;
  if (std::optional<KernelSpec> single = WithSingleElementRowPhases(g, kernel)) {
    candidates.push_back(std::move(*single));
  }
  if (std::optional<KernelSpec> prefetched = WithPrefetchedRowPhases(kernel)) {
    candidates.push_back(std::move(*prefetched));
  }
  const bool has_column_phase =
      std::any_of(kernel.phases.begin(), kernel.phases.end(),
                  [](const KernelSpec& p) { return p.kind == KernelKind::kColumnReduce; });
  if (!has_column_phase) return candidates;
  const int registers = kernel.mapping.registers_per_thread;
  // 16 and 32 bytes a lane, around the 24 that #18's column phase keeps in flight (82% of
  // DRAM throughput on the H200): 16 at the occupancy the scheduler counts on, then both at
  // half of it, where twice the registers leave room for the loads.
  for (const auto& [registers_per_thread, lane_bytes] :
       {std::pair{registers, 16}, std::pair{2 * registers, 16}, std::pair{2 * registers, 32}}) {
    if (std::optional<KernelSpec> trial =
            WithColumnLaneBytes(g, kernel, device, registers_per_thread, lane_bytes)) {
      candidates.push_back(std::move(*trial));
    }
  }
  return candidates;
}

}  // namespace stitch
