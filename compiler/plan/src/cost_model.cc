// The analytical cost model. Memory-intensive kernels are priced as what limits them: moving
// their global-memory bytes, plus the fixed costs of launching and of synchronising.
//
// Per kernel, with B blocks of T threads, R resident blocks per SM and N SMs:
//
//   bytes    = bytes_loaded + bytes_stored (the scheduler's count: each buffer once per launch
//              or phase, so a value read again in another kernel or after a grid barrier counts
//              again, and a re-read inside one launch is taken as a cache hit)
//   slots    = N x R, the blocks that can run at once
//   passes   = ceil(work_items / items per pass), where a pass is one trip of a block
//              through its grid-stride loop: T x vector_width elements (loop kernels),
//              rows_per_block rows (row kernels) or one 32-column tile (column reductions)
//   busy     = min(B, passes), the blocks that get any work at all
//   parallel = min(busy, slots)
//
//   bandwidth = min(peak,                                       HBM
//                   peak x min(busy, N) / N,                    share of the busy SMs
//                   parallel x T x in-flight bytes / latency)   Little's law
//   imbalance = critical / mean, with
//       critical = ceil(busy / parallel) x ceil(passes / busy)   passes on the busiest slot
//       mean     = passes / parallel                             passes per slot if even
//               (fit-5: a grid past one wave takes the busiest SM's share instead,
//               ceil(busy / N) x ceil(passes / busy) x N / passes, as SMs take blocks when
//               slots free; DealtImbalance)
//   memory    = max(bytes x imbalance / bandwidth, latency when the kernel loads anything,
//                   ceil(B / N) x block_dispatch_seconds)     (fit-4: an SM's block starts)
//               where fit-4 (fit-5 within one wave) stretches only what the partial rounds
//               cannot draw: they run with a share of the slots busy, at min(peak, share x
//               the Little's law bandwidth) (PartialRoundsSeconds), so a kernel with loads
//               enough in flight is not stretched by its last wave
//   launch    = device.launch_seconds
//   barriers  = grid_barriers x grid_barrier_seconds
//             + block_barriers_per_item x critical x block_barrier_seconds
//   issue     = critical x I x warps per block x blocks per SM / schedulers
//               / min(1 / issue_seconds, warps per scheduler / dependent_issue_seconds)
//               (h100-fit-2: I, the cubin's instructions a warp issues per pass)
//   seconds   = max(memory, issue) + launch + barriers
//               (a row tile: max(memory, issue) + min(memory, issue) / R; OverlappedSeconds)
//
// A split reduction (reduce_chunks > 1) adds its grid barrier and the round trips of
// combining the partials (CombineRoundTrips: one per batch of loads a lane issues), or, when
// the last block of each tile combines them, no grid barrier but the round trips of the
// last arrival and its loads (LastBlockCombineRoundTrips). A global
// kernel is one launch plus its phases, each priced as above with the kernel's grid and
// resources, plus a grid barrier between consecutive phases; its bytes are the sum of the
// phases' (a value re-read after a grid barrier counts again: across a barrier the data set
// is the whole tensor, larger than L2 at the shapes worth stitching this way).
//
// A kernel that cannot run at all costs +infinity (see kInfeasibleSeconds).
//
// What the model ignores. Its ceiling is the datasheet bandwidth; streaming kernels reach
// 85-97% of it on A100 and H100 PCIe and 66-81% on H200, so the model is optimistic there.
// Data that stays in L2 from one kernel to the next, or across a grid barrier, is charged at
// DRAM bandwidth (pessimistic, mostly for multi-kernel plans); re-reads inside one launch are
// free (optimistic for long rows that outgrow L1 and L2). The issue term counts each of the
// cubin's instructions once per pass: inner loops, and slow paths the data takes (IEEE
// division's), are not counted, and every instruction costs the same. There is no term for
// DRAM page or partition effects, atomics, register spills, clock changes, launch overlap
// (CUDA graphs, programmatic dependent launch on sm_90), or, before fit-4, the faster tail
// of a partial wave.
// Each effect, which way it biases the estimate, and the source of every constant are in
// compiler/plan/COST_MODEL_SOURCES.md.
#include "stitch/plan/cost_model.h"

#include <algorithm>
#include <limits>

#include "int_math.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/schedule.h"

namespace stitch {

namespace {

// The cost of a kernel the device cannot run: one of its blocks does not fit on an SM (too
// many threads, registers or shared memory), or it has grid barriers and more blocks than
// can be co-resident (it would deadlock). Infinity keeps every comparison and sum honest: a
// plan holding such a kernel costs more than any plan that can run, so a planner rejects it
// instead of trading it against other terms. Such a kernel reports
// resident_blocks_per_sm == 0.
constexpr double kInfeasibleSeconds = std::numeric_limits<double>::infinity();

// h100-fit-1's constants: the fit of tools/fit_cost_model.py to the 90 plans of
// testdata/gpu/h100_80gb_hbm3/2026-11-26_a83a312, rounded (COST_MODEL_SOURCES.md, section 6).
// The bandwidth fraction and the reuse window stayed at their starting values (90% of the
// datasheet, the lower end of the 85-97% streaming kernels reach by [GB]; half of L2): the
// fit found no better value for either.
constexpr double kFitBandwidthFraction = 0.90;
constexpr double kFitReuseWindowFraction = 0.5;
constexpr double kFitDramLatencySeconds = 425e-9;
constexpr double kFitLaunchSeconds = 3.0e-6;
constexpr double kFitGridBarrierSeconds = 3.0e-6;
constexpr double kFitBlockBarrierSeconds = 72e-9;
constexpr double kFitRowPassSeconds = 2.0e-6;

// h100-fit-2's constants: h100-fit-1's above, held, and the two of its instruction-issue
// term, fitted by tools/fit_cost_model.py --fit issue_seconds,dependent_issue_seconds on the
// same 90 plans, rounded (COST_MODEL_SOURCES.md, section 6): a scheduler's time per warp
// instruction (1.17 cycles of the 1.98 GHz boost clock) and the time between two issues of
// one warp (9.4 cycles; the objective is nearly flat from 2.5 to 7 ns).
constexpr double kFit2IssueSeconds = 0.59e-9;
constexpr double kFit2DependentIssueSeconds = 4.75e-9;

// fit-3's H200 constants: h100-fit-2's terms, all nine constants fitted by
// tools/fit_cost_model.py to the 90 plans of testdata/gpu/h200/2026-11-28_afdf996 (CUPTI
// kernel times), rounded (COST_MODEL_SOURCES.md, section 6). Bandwidth and reuse window are
// shares of the H200's table figures (4.8 TB/s, 60 MiB of L2).
CostModelParameters H200Fit3(const GpuDevice& h200) {
  CostModelParameters p;
  p.bandwidth_bytes_per_second = h200.hbm_bytes_per_second * 0.862;
  p.reuse_window_bytes = static_cast<double>(h200.l2_bytes) * 0.25;
  p.assembled_registers = true;
  p.dram_latency_seconds = 628e-9;
  p.launch_seconds = 1.71e-6;
  p.grid_barrier_seconds = 5.5e-6;
  p.block_barrier_seconds = 27e-9;
  p.row_pass_seconds = 2.09e-6;
  p.issue_seconds = 0.60e-9;
  p.dependent_issue_seconds = 2.02e-9;
  p.l2_bytes_per_second = h200.l2_bytes_per_second;
  return p;
}

// fit-4's terms on fit-3's constants. The block start interval is read off the kernels of
// many short blocks in the sets fit-3 rests on (COST_MODEL_SOURCES.md, section 6): Nsight
// Compute timed loops of 200,704 to 409,600 blocks of 128 threads, each a vector a thread,
// at 89.6-92.7 ns per block per SM on the H100 (testdata/gpu/h100_80gb_hbm3/
// 2026-11-27_0775291) and 80.8-82.5 on the H200 (testdata/gpu/h200/2026-11-28_afdf996,
// ncu_rows_*.csv), however many bytes their blocks moved: on the H200, #18's and #23's loops
// at half the blocks took 75% and 79% of the time. Devices without a measurement keep none.
CostModelParameters WithFit4Terms(const GpuDevice& device, CostModelParameters p) {
  p.partial_rounds_share_bandwidth = true;
  if (device.name == "H100") p.block_dispatch_seconds = 90e-9;
  if (device.name == "H200") p.block_dispatch_seconds = 81e-9;
  return p;
}

// A kernel that has not been through the scheduler: its mapping is the default one and
// carries no traffic. Plans built by a planner alone (no scheduler pass yet) are priced the
// coarse way: each input read once and each output written once, at peak bandwidth. Every
// scheduled kernel that touches memory has work items or bytes, so it never lands here.
bool IsUnscheduled(const ThreadMapping& m) {
  return m.work_items == 0 && m.bytes_loaded == 0 && m.bytes_stored == 0;
}

// The mapping occupancy is computed from: the scheduler's, with the assembler's register
// count in place of the estimate where the version reads it and the kernel has one.
ThreadMapping OccupancyMapping(const ThreadMapping& m, const CostModelParameters& p) {
  ThreadMapping occupancy = m;
  if (p.assembled_registers && m.assembled_registers > 0) {
    occupancy.registers_per_thread = m.assembled_registers;
  }
  return occupancy;
}

// Bytes that miss L2 beyond the scheduler's count, for `parallel` blocks in flight.
int64_t MissedRereadBytes(KernelKind kind, const ThreadMapping& m, const CostModelParameters& p,
                          int64_t parallel) {
  if (p.reuse_window_bytes <= 0) return 0;
  int64_t missed = 0;
  // A loop-mode row is read again after the blocks in flight have read their rows: it is
  // still in L2 while their rows together fit the reuse window.
  const double rows_in_flight = static_cast<double>(parallel * ItemsPerPass(kind, m));
  const int64_t footprint = m.reread_footprint_bytes_per_item > 0
                                ? m.reread_footprint_bytes_per_item
                                : m.reread_bytes_per_item;
  if (m.reread_bytes_per_item > 0 &&
      rows_in_flight * static_cast<double>(footprint) > p.reuse_window_bytes) {
    missed += m.reread_bytes_per_item * std::max<int64_t>(m.work_items, 1);
  }
  // The rest of a strided sector is used only after strided_reuse_bytes of other sectors.
  if (m.strided_sector_bytes > m.strided_input_bytes &&
      static_cast<double>(m.strided_reuse_bytes) > p.reuse_window_bytes) {
    missed += m.strided_sector_bytes - m.strided_input_bytes;
  }
  return missed;
}

// The time L2 takes to serve a kernel's bytes: every byte it loads or stores, and for a strided
// read the rest of each element's sector, which crosses L2 whether its other bytes are used
// later from L2 or fetched again from DRAM. Only the busy SMs' share of L2 serves them, as
// for DRAM. Coalesced kernels reach DRAM's bandwidth long before L2's, so this binds only a
// kernel whose strided sectors outweigh its bytes by L2's margin over DRAM (about 3x).
double L2Seconds(int64_t global_bytes, const ThreadMapping& m, const CostModelParameters& p,
                 double imbalance, int64_t busy_sms, int64_t sms) {
  if (p.l2_bytes_per_second <= 0) return 0;
  const int64_t strided_rest = std::max<int64_t>(m.strided_sector_bytes - m.strided_input_bytes, 0);
  const double bandwidth = p.l2_bytes_per_second * static_cast<double>(busy_sms) /
                           static_cast<double>(std::max<int64_t>(sms, 1));
  return static_cast<double>(global_bytes + strided_rest) * imbalance / bandwidth;
}

class AnalyticalCostModel : public CostModel {
 public:
  AnalyticalCostModel(GpuDevice device, CostModelParameters parameters)
      : device_(std::move(device)), p_(parameters) {}

  PlanCost Estimate(const Graph& g, const FusionPlan& plan) const override {
    PlanCost cost;
    cost.kernels = static_cast<int>(plan.kernels.size());
    cost.per_kernel.reserve(plan.kernels.size());
    for (const KernelSpec& k : plan.kernels) {
      KernelCost c = EstimateKernel(g, k);
      cost.seconds += c.seconds;
      cost.global_bytes += c.global_bytes;
      cost.per_kernel.push_back(c);
    }
    return cost;
  }

  KernelCost EstimateKernel(const Graph& g, const KernelSpec& kernel) const override {
    if (kernel.kind == KernelKind::kGlobalStitch && !IsUnscheduled(kernel.mapping)) {
      return EstimateGlobal(g, kernel);
    }
    return EstimateLaunchOrPhase(g, kernel, /*phase=*/false);
  }

 private:
  // A kernel of its own, or (`phase`) one phase of a global kernel, priced with that
  // kernel's grid and resources.
  KernelCost EstimateLaunchOrPhase(const Graph& g, const KernelSpec& kernel, bool phase) const {
    const ThreadMapping& m = kernel.mapping;
    KernelCost c;
    c.launch_seconds = p_.launch_seconds;
    c.resident_blocks_per_sm = ResidentBlocksPerSm(device_, OccupancyMapping(m, p_));
    const double peak = p_.bandwidth_bytes_per_second;
    const int64_t sms = std::max(device_.sms, 1);
    const int64_t slots = int64_t{c.resident_blocks_per_sm} * sms;
    const int64_t blocks = std::max<int64_t>(static_cast<int64_t>(m.launch.blocks()), 1);
    c.waves =
        slots > 0 ? static_cast<double>(blocks) / static_cast<double>(slots) : kInfeasibleSeconds;

    if (IsUnscheduled(m)) {
      FusionPlan one;
      one.kernels.push_back(kernel);
      c.global_bytes = c.dram_bytes = EstimateTraffic(g, one).total();
      c.memory_seconds = static_cast<double>(c.global_bytes) / peak;
      c.bandwidth_fraction = peak / device_.hbm_bytes_per_second;
      c.seconds = c.memory_seconds + c.launch_seconds;
      return c;
    }

    c.global_bytes = m.bytes_loaded + m.bytes_stored;
    const bool deadlocks = m.grid_barriers > 0 && blocks > slots;
    if (slots == 0 || deadlocks) {
      c.resident_blocks_per_sm = 0;
      c.memory_seconds = kInfeasibleSeconds;
      c.seconds = kInfeasibleSeconds;
      return c;
    }

    // Passes of the grid-stride loop in all, and the blocks that get at least one. A grid
    // larger than its work leaves the surplus blocks idle (they exit at once and cost
    // nothing); a mapping without a work count is taken as one pass per block.
    const int64_t passes =
        m.work_items > 0 ? CeilDiv(m.work_items, ItemsPerPass(kernel.kind, m)) : blocks;
    const int64_t busy = std::min(blocks, passes);
    const int64_t parallel = std::min(busy, slots);

    // Wave and work imbalance. Resident blocks progress at about the same rate, so the
    // kernel ends when the slot with the most passes ends. A slot runs ceil(busy / parallel)
    // blocks one after another (the wave count, rounded up: blocks of the last, partial
    // wave leave slots idle), each with at most ceil(passes / busy) passes (the grid-stride
    // loop deals passes to blocks in turn, so a capped grid is balanced to within one pass).
    // Against the mean, passes / parallel, this stretches memory time: ceil(waves) / waves
    // for a one-pass-per-block grid, and 1 + O(blocks / passes) for a capped, looping one.
    // Stretching the whole memory time is pessimistic for a kernel at peak bandwidth, whose
    // tail blocks could run faster while others idle; it is exact for a latency-bound one.
    const int64_t critical = CeilDiv(busy, parallel) * CeilDiv(passes, busy);
    // fit-5: past the first wave, blocks go to SMs as slots free, so the kernel ends with its
    // busiest SM's blocks, ceil(busy / N) over its slots, not with whole rounds.
    const bool dealt = p_.dealt_blocks && busy > parallel;
    const double imbalance = dealt ? DealtImbalance(busy, passes, sms)
                                   : static_cast<double>(critical) * static_cast<double>(parallel) /
                                         static_cast<double>(passes);
    c.imbalance = imbalance;

    // Achieved bandwidth, the least of three bounds.
    //  * Peak HBM bandwidth.
    //  * The busy SMs' share of it: DRAM traffic reaches the memory partitions through each
    //    SM's port into the on-chip network, and the model gives each SM 1/N of peak, so a
    //    grid that keeps few SMs busy cannot draw the whole bandwidth (24 blocks on 132 SMs
    //    reach at most 24/132 of peak).
    //  * Little's law: bandwidth = bytes in flight / latency. Each resident thread keeps
    //    load_bytes_in_flight_per_thread bytes of loads outstanding (independent loads of one
    //    iteration times their width), and a load waits dram_latency_seconds under load.
    //    Stores are posted and need no latency hiding, so a kernel that only stores, or
    //    loads only small inputs served from cache (none in flight), is not bound this way.
    const int64_t busy_sms = std::min(busy, sms);
    const double bandwidth_cap =
        std::min(peak, peak * static_cast<double>(busy_sms) / static_cast<double>(sms));
    double in_flight_bandwidth = std::numeric_limits<double>::infinity();
    if (m.bytes_loaded > 0 && m.load_bytes_in_flight_per_thread > 0) {
      const double in_flight = static_cast<double>(parallel) *
                               static_cast<double>(m.launch.block_threads()) *
                               m.load_bytes_in_flight_per_thread;
      in_flight_bandwidth = in_flight / p_.dram_latency_seconds;
    }
    const double bandwidth = std::min(bandwidth_cap, in_flight_bandwidth);

    c.issue_seconds = IssueSeconds(m, parallel, critical, c.resident_blocks_per_sm);
    c.dram_bytes = c.global_bytes + MissedRereadBytes(kernel.kind, m, p_, parallel);
    c.memory_seconds =
        p_.partial_rounds_share_bandwidth && !dealt
            ? PartialRoundsSeconds(static_cast<double>(c.dram_bytes), passes, busy, parallel,
                                   critical, bandwidth_cap, in_flight_bandwidth)
            : static_cast<double>(c.dram_bytes) * imbalance / bandwidth;
    c.memory_seconds =
        std::max(c.memory_seconds, L2Seconds(c.global_bytes, m, p_, imbalance, busy_sms, sms));
    // A row kernel's pass is a chain: load the row, reduce it across the row's threads,
    // compute and store; the next pass of the block starts after it. Few resident blocks
    // leave the chain exposed, so the busiest slot takes at least its passes times the
    // chain's length.
    if (kernel.kind == KernelKind::kRowStitch || kernel.kind == KernelKind::kRowReduce) {
      c.memory_seconds =
          std::max(c.memory_seconds, static_cast<double>(critical) * p_.row_pass_seconds);
    }
    // However few its bytes, a kernel that loads waits for at least one DRAM round trip.
    if (m.bytes_loaded > 0) {
      c.memory_seconds = std::max(c.memory_seconds, p_.dram_latency_seconds);
    }
    // However short its blocks, each SM starts them one after another. A global kernel's
    // phases share its one launch's blocks, whose few starts EstimateGlobal leaves out.
    if (!phase) {
      c.memory_seconds = std::max(c.memory_seconds, BlockStartSeconds(blocks, device_, p_));
    }
    const double datasheet = device_.hbm_bytes_per_second;
    const double busy_seconds = OverlappedSeconds(kernel.kind, m, c.memory_seconds, c.issue_seconds,
                                                  c.resident_blocks_per_sm);
    c.bandwidth_fraction = c.global_bytes > 0 && busy_seconds > 0
                               ? static_cast<double>(c.global_bytes) / busy_seconds / datasheet
                               : bandwidth / imbalance / datasheet;

    // Barriers. A grid barrier costs its measured latency each time. Block barriers stall
    // one block at a time while other resident blocks keep the memory system busy, so they
    // cost block_barrier_seconds (the pipeline drain a memory-bound block sees) per barrier
    // along the busiest slot's chain of passes. Rows a block handles side by side in one pass
    // share their barriers, so barriers are counted per pass, not per row.
    c.barrier_seconds = std::max(m.grid_barriers, 0) * p_.grid_barrier_seconds +
                        static_cast<double>(std::max(m.block_barriers_per_item, 0)) *
                            static_cast<double>(critical) * p_.block_barrier_seconds;
    // A split reduction's second stage: after the barrier a warp's lanes each load their
    // partials a batch at a time (CombineRoundTrips); or, combined by the last block of each
    // tile, the last arrival's atomic and the tile's loads of its partials
    // (LastBlockCombineRoundTrips), after the busiest slot's passes.
    if (m.reduce_chunks > 1) {
      const bool last_block = m.split_combine == ThreadMapping::SplitCombine::kLastBlock;
      const int64_t round_trips = last_block
                                      ? LastBlockCombineRoundTrips(m.reduce_chunks, m.column_tile_y)
                                      : CombineRoundTrips(m.reduce_chunks);
      c.barrier_seconds += static_cast<double>(round_trips) * p_.dram_latency_seconds;
    }

    c.seconds = busy_seconds + c.launch_seconds + c.barrier_seconds;
    return c;
  }

  // The busiest SM's passes against the mean, for a grid of `busy` blocks on `sms` SMs dealt
  // as slots free: it runs ceil(busy / sms) blocks of up to ceil(passes / busy) passes each
  // over its slots, where the mean SM runs passes / sms. For one pass a block this is
  // BusiestSmShare's share (schedule_loop.cc); it does not depend on the slots an SM has.
  static double DealtImbalance(int64_t busy, int64_t passes, int64_t sms) {
    return static_cast<double>(CeilDiv(busy, sms) * CeilDiv(passes, busy)) *
           static_cast<double>(sms) / static_cast<double>(passes);
  }

  // The time the busiest slot takes over its `critical` rounds of passes, moving `bytes` in
  // all. Rounds in which every slot is busy draw `cap` or what their loads in flight allow
  // (Little's law: `in_flight_bandwidth` with all `parallel` slots busy), whichever is less.
  // The rounds past them (a last, partial wave of blocks, or the passes of a capped grid that
  // do not divide evenly among its blocks) keep only a share of the slots busy, and their
  // loads in flight shrink with it: a kernel that keeps more in flight than the cap needs
  // still reaches the cap with fewer slots busy, so its tail takes no longer than its bytes,
  // where a latency-bound kernel's tail takes as long as a round with every slot busy.
  static double PartialRoundsSeconds(double bytes, int64_t passes, int64_t busy, int64_t parallel,
                                     int64_t critical, double cap, double in_flight_bandwidth) {
    if (passes <= 0 || parallel <= 0) return 0;
    // Rounds of every slot: never more than the passes fill, and where the last wave of
    // blocks is partial, only the whole waves' (that wave runs all of its blocks' passes with
    // its share of the slots).
    int64_t full = std::min(critical, passes / parallel);
    if (busy % parallel != 0) full = std::min(full, busy / parallel * CeilDiv(passes, busy));
    const double round_bytes = bytes * static_cast<double>(parallel) / static_cast<double>(passes);
    double seconds = static_cast<double>(full) * round_bytes / std::min(cap, in_flight_bandwidth);
    const int64_t tail_rounds = critical - full;
    const int64_t tail_passes = passes - full * parallel;
    if (tail_rounds > 0 && tail_passes > 0) {
      const double busy_share = static_cast<double>(tail_passes) /
                                (static_cast<double>(tail_rounds) * static_cast<double>(parallel));
      seconds += static_cast<double>(tail_rounds) * busy_share * round_bytes /
                 std::min(cap, busy_share * in_flight_bandwidth);
    }
    return seconds;
  }

  // Memory and issue time overlap when other warps compute while some wait for loads. A row
  // tile (ThreadMapping::transpose_tile on a row kernel) stages its rows behind a block
  // barrier: every warp of the block waits for the whole tile, then computes while none of
  // them loads, so only the SM's other resident blocks hide one phase behind the other, and a
  // block alone on its SM exposes both. On the H200, suite row #13's tile of 1,024 threads,
  // one block per SM, ran in 162 us where max(memory, issue) priced it at about 85 us on
  // the H100 (testdata/gpu/h200/2026-11-28_afdf996): the sum of the two is what it measured.
  static double OverlappedSeconds(KernelKind kind, const ThreadMapping& m, double memory,
                                  double issue, int resident_blocks_per_sm) {
    const double longer = std::max(memory, issue);
    if (kind != KernelKind::kRowStitch || m.transpose_tile < 0) return longer;
    return longer + std::min(memory, issue) / std::max(resident_blocks_per_sm, 1);
  }

  // The time the busiest SM takes to issue the kernel's instructions: its resident blocks'
  // warps each issue the cubin's instructions once per pass, for the busiest slot's
  // `critical` passes. Each of the SM's schedulers (register_sub_partitions) issues one warp
  // instruction per issue_seconds at best; a warp issues at most one per
  // dependent_issue_seconds, so with few warps per scheduler (one large block per SM) the
  // warps' chains of dependent instructions set the pace. The count is the cubin's, or the
  // scheduler's estimate while it compares mappings; 0 without either (a global kernel's
  // phase, whose share of the cubin is not known) or in versions without the term.
  double IssueSeconds(const ThreadMapping& m, int64_t parallel, int64_t critical,
                      int resident_blocks_per_sm) const {
    const int instructions =
        m.assembled_instructions > 0 ? m.assembled_instructions : m.estimated_instructions;
    if (p_.issue_seconds <= 0 || instructions <= 0) return 0;
    const int64_t sms = std::max(device_.sms, 1);
    const double schedulers = std::max(device_.register_sub_partitions, 1);
    const double warps_per_block = static_cast<double>(CeilDiv(m.launch.block_threads(), 32));
    const double blocks_per_sm = static_cast<double>(
        std::min<int64_t>(CeilDiv(parallel, sms), std::max(resident_blocks_per_sm, 1)));
    const double warps_per_scheduler = warps_per_block * blocks_per_sm / schedulers;
    double issue_rate = 1.0 / p_.issue_seconds;  // warp instructions per second per scheduler
    if (p_.dependent_issue_seconds > 0) {
      issue_rate = std::min(issue_rate, warps_per_scheduler / p_.dependent_issue_seconds);
    }
    return static_cast<double>(critical) * static_cast<double>(instructions) * warps_per_scheduler /
           issue_rate;
  }

  // A global kernel: one launch, its phases one after another on the same co-resident grid
  // (each priced with the kernel's block, shared memory and registers, which set how many
  // blocks are resident), and a grid barrier between consecutive phases.
  KernelCost EstimateGlobal(const Graph& g, const KernelSpec& kernel) const {
    const ThreadMapping& m = kernel.mapping;
    KernelCost c;
    c.launch_seconds = p_.launch_seconds;
    c.resident_blocks_per_sm = ResidentBlocksPerSm(device_, OccupancyMapping(m, p_));
    const int64_t slots = int64_t{c.resident_blocks_per_sm} * std::max(device_.sms, 1);
    const int64_t blocks = std::max<int64_t>(static_cast<int64_t>(m.launch.blocks()), 1);
    c.waves =
        slots > 0 ? static_cast<double>(blocks) / static_cast<double>(slots) : kInfeasibleSeconds;
    if (slots == 0 || blocks > slots) {
      c.resident_blocks_per_sm = 0;
      c.memory_seconds = c.seconds = kInfeasibleSeconds;
      return c;
    }
    const int between = std::max<int>(static_cast<int>(kernel.phases.size()) - 1, 0);
    c.barrier_seconds = between * p_.grid_barrier_seconds;
    double weighted_bandwidth = 0;
    for (const KernelSpec& phase : kernel.phases) {
      KernelSpec priced = phase;
      priced.mapping.shared_bytes = m.shared_bytes;
      priced.mapping.registers_per_thread = m.registers_per_thread;
      priced.mapping.assembled_registers = m.assembled_registers;
      const KernelCost p = EstimateLaunchOrPhase(g, priced, /*phase=*/true);
      c.memory_seconds += p.memory_seconds;
      c.barrier_seconds += p.barrier_seconds;
      c.global_bytes += p.global_bytes;
      c.dram_bytes += p.dram_bytes;
      weighted_bandwidth += p.bandwidth_fraction * p.memory_seconds;
    }
    c.bandwidth_fraction = c.memory_seconds > 0 ? weighted_bandwidth / c.memory_seconds : 0;
    c.seconds = c.memory_seconds + c.launch_seconds + c.barrier_seconds;
    return c;
  }

  GpuDevice device_;
  CostModelParameters p_;
};

}  // namespace

std::string_view CostModelVersionName(CostModelVersion v) {
  switch (v) {
    case CostModelVersion::kDatasheet:
      return "datasheet";
    case CostModelVersion::kH100Fit1:
      return "h100-fit-1";
    case CostModelVersion::kH100Fit2:
      return "h100-fit-2";
    case CostModelVersion::kFit3:
      return "fit-3";
    case CostModelVersion::kFit4:
      return "fit-4";
    case CostModelVersion::kFit5:
      return "fit-5";
  }
  return "datasheet";
}

std::optional<CostModelVersion> ParseCostModelVersion(std::string_view name) {
  for (CostModelVersion v :
       {CostModelVersion::kDatasheet, CostModelVersion::kH100Fit1, CostModelVersion::kH100Fit2,
        CostModelVersion::kFit3, CostModelVersion::kFit4, CostModelVersion::kFit5}) {
    if (CostModelVersionName(v) == name) return v;
  }
  return std::nullopt;
}

CostModelParameters CostModelParametersFor(const GpuDevice& device, CostModelVersion version) {
  if (version == CostModelVersion::kFit5) {
    CostModelParameters p = CostModelParametersFor(device, CostModelVersion::kFit4);
    p.dealt_blocks = true;
    return p;
  }
  if (version == CostModelVersion::kFit4) {
    return WithFit4Terms(device, CostModelParametersFor(device, CostModelVersion::kFit3));
  }
  CostModelParameters p;
  p.bandwidth_bytes_per_second = device.hbm_bytes_per_second;
  p.dram_latency_seconds = device.dram_latency_seconds;
  p.launch_seconds = device.launch_seconds;
  p.grid_barrier_seconds = device.grid_barrier_seconds;
  p.block_barrier_seconds = device.block_barrier_seconds;
  if (version == CostModelVersion::kDatasheet) return p;
  if (version == CostModelVersion::kFit3 && device.name == "H200") return H200Fit3(device);
  // The H100's fitted versions: tools/fit_cost_model.py on
  // testdata/gpu/h100_80gb_hbm3/2026-11-26_a83a312 (COST_MODEL_SOURCES.md, section 6). The
  // bandwidth fraction and the share of L2 a re-read survives in are taken to hold on every
  // device; the times are the H100's, and before fit-3 the H200 (the same die) shared them.
  // Other devices keep their table's times and have no issue term.
  p.bandwidth_bytes_per_second = device.hbm_bytes_per_second * kFitBandwidthFraction;
  p.reuse_window_bytes = static_cast<double>(device.l2_bytes) * kFitReuseWindowFraction;
  p.assembled_registers = true;
  if (device.name == "H100" || device.name == "H200") {
    p.dram_latency_seconds = kFitDramLatencySeconds;
    p.launch_seconds = kFitLaunchSeconds;
    p.grid_barrier_seconds = kFitGridBarrierSeconds;
    p.block_barrier_seconds = kFitBlockBarrierSeconds;
    p.row_pass_seconds = kFitRowPassSeconds;
    // h100-fit-2 adds the issue term. Plans priced before assembly have no instruction
    // count, so they price as under h100-fit-1 (the never-slower choice among them too).
    if (version == CostModelVersion::kH100Fit2 || version == CostModelVersion::kFit3) {
      p.issue_seconds = kFit2IssueSeconds;
      p.dependent_issue_seconds = kFit2DependentIssueSeconds;
    }
  }
  // fit-3 prices L2's bandwidth too (L2Seconds); the versions before it keep their prices.
  if (version == CostModelVersion::kFit3) p.l2_bytes_per_second = device.l2_bytes_per_second;
  return p;
}

double BlockStartSeconds(int64_t blocks, const GpuDevice& device, const CostModelParameters& p) {
  return static_cast<double>(CeilDiv(blocks, std::max(device.sms, 1))) * p.block_dispatch_seconds;
}

const GpuDevice& PlanningDevice(const GpuDevice& device) {
  // Looked up once: the scheduler asks for every kernel and candidate it prices.
  static const GpuDevice& h100 = *FindDevice("H100");
  return device.name == "H200" ? h100 : device;
}

std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device,
                                                  CostModelVersion version) {
  return NewAnalyticalCostModel(device, CostModelParametersFor(device, version));
}

std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device,
                                                  const CostModelParameters& parameters) {
  return std::make_unique<AnalyticalCostModel>(device, parameters);
}

std::unique_ptr<CostModel> NewPlanningCostModel(const GpuDevice& device) {
  return NewAnalyticalCostModel(PlanningDevice(device), kPlanningCostModel);
}

}  // namespace stitch
