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
//   memory    = max(bytes x imbalance / bandwidth, latency when the kernel loads anything)
//   launch    = device.launch_seconds
//   barriers  = grid_barriers x grid_barrier_seconds
//             + block_barriers_per_item x critical x block_barrier_seconds
//   seconds   = memory + launch + barriers
//
// A split reduction (reduce_chunks > 1) adds its grid barrier and ceil(chunks / 32) DRAM
// round trips for combining the partials. A global kernel is one launch plus its phases,
// each priced as above with the kernel's grid and resources, plus a grid barrier between
// consecutive phases; its bytes are the sum of the phases' (a value re-read after a grid
// barrier counts again: across a barrier the data set is the whole tensor, larger than L2
// at the shapes worth stitching this way).
//
// A kernel that cannot run at all costs +infinity (see kInfeasibleSeconds).
//
// What the model ignores. Its ceiling is the datasheet bandwidth; streaming kernels reach
// 85-97% of it on A100 and H100 PCIe and 66-81% on H200, so the model is optimistic there.
// Data that stays in L2 from one kernel to the next, or across a grid barrier, is charged at
// DRAM bandwidth (pessimistic, mostly for multi-kernel plans); re-reads inside one launch are
// free (optimistic for long rows that outgrow L1 and L2). There is no term for DRAM page or
// partition effects, atomics, instruction issue (transcendentals), register spills, clock
// changes, launch overlap (CUDA graphs, programmatic dependent launch on sm_90) or the faster
// tail of a partial wave. Each effect, which way it biases the estimate, and the source of
// every constant are in compiler/plan/COST_MODEL_SOURCES.md.
#include "stitch/plan/cost_model.h"

#include <algorithm>
#include <limits>

#include "int_math.h"
#include "stitch/plan/baseline_planner.h"

namespace stitch {

namespace {

// The cost of a kernel the device cannot run: one of its blocks does not fit on an SM (too
// many threads, registers or shared memory), or it has grid barriers and more blocks than
// can be co-resident (it would deadlock). Infinity keeps every comparison and sum honest: a
// plan holding such a kernel costs more than any plan that can run, so a planner rejects it
// instead of trading it against other terms. Such a kernel reports
// resident_blocks_per_sm == 0.
constexpr double kInfeasibleSeconds = std::numeric_limits<double>::infinity();

// Elements, rows or tiles (the unit of `work_items`) one block covers per pass of its
// grid-stride loop.
int64_t ItemsPerPass(KernelKind kind, const ThreadMapping& m) {
  switch (kind) {
    case KernelKind::kLoop:
      // Each thread handles one vector of `vector_width` elements per pass.
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

// A kernel that has not been through the scheduler: its mapping is the default one and
// carries no traffic. Plans built by a planner alone (no scheduler pass yet) are priced the
// coarse way: each input read once and each output written once, at peak bandwidth. Every
// scheduled kernel that touches memory has work items or bytes, so it never lands here.
bool IsUnscheduled(const ThreadMapping& m) {
  return m.work_items == 0 && m.bytes_loaded == 0 && m.bytes_stored == 0;
}

class AnalyticalCostModel : public CostModel {
 public:
  explicit AnalyticalCostModel(GpuDevice device) : device_(std::move(device)) {}

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
    const ThreadMapping& m = kernel.mapping;
    KernelCost c;
    c.launch_seconds = device_.launch_seconds;
    c.resident_blocks_per_sm = ResidentBlocksPerSm(device_, m);
    const double peak = device_.hbm_bytes_per_second;
    const int64_t sms = std::max(device_.sms, 1);
    const int64_t slots = int64_t{c.resident_blocks_per_sm} * sms;
    const int64_t blocks = std::max<int64_t>(static_cast<int64_t>(m.launch.blocks()), 1);
    c.waves =
        slots > 0 ? static_cast<double>(blocks) / static_cast<double>(slots) : kInfeasibleSeconds;

    if (IsUnscheduled(m)) {
      FusionPlan one;
      one.kernels.push_back(kernel);
      c.global_bytes = EstimateTraffic(g, one).total();
      c.memory_seconds = static_cast<double>(c.global_bytes) / peak;
      c.bandwidth_fraction = 1.0;
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
    const double imbalance =
        static_cast<double>(critical) * static_cast<double>(parallel) / static_cast<double>(passes);

    // Achieved bandwidth, the least of three bounds.
    //  * Peak HBM bandwidth.
    //  * The busy SMs' share of it: DRAM traffic reaches the memory partitions through each
    //    SM's port into the on-chip network, and the model gives each SM 1/N of peak, so a
    //    grid that keeps few SMs busy cannot draw the whole bandwidth (24 blocks on 132 SMs
    //    reach at most 24/132 of peak).
    //  * Little's law: bandwidth = bytes in flight / latency. Each resident thread keeps
    //    load_bytes_in_flight_per_thread bytes of loads outstanding (independent loads of one
    //    iteration times their width), and a load waits dram_latency_seconds under load.
    //    Stores are posted and need no latency hiding, so a kernel that only stores is not
    //    bound this way.
    const int64_t busy_sms = std::min(busy, sms);
    double bandwidth =
        std::min(peak, peak * static_cast<double>(busy_sms) / static_cast<double>(sms));
    if (m.bytes_loaded > 0) {
      const double in_flight = static_cast<double>(parallel) *
                               static_cast<double>(m.launch.block_threads()) *
                               std::max(m.load_bytes_in_flight_per_thread, 1);
      bandwidth = std::min(bandwidth, in_flight / device_.dram_latency_seconds);
    }

    c.memory_seconds = static_cast<double>(c.global_bytes) * imbalance / bandwidth;
    // However few its bytes, a kernel that loads waits for at least one DRAM round trip.
    if (m.bytes_loaded > 0) {
      c.memory_seconds = std::max(c.memory_seconds, device_.dram_latency_seconds);
    }
    c.bandwidth_fraction = c.global_bytes > 0 && c.memory_seconds > 0
                               ? static_cast<double>(c.global_bytes) / c.memory_seconds / peak
                               : bandwidth / imbalance / peak;

    // Barriers. A grid barrier costs its measured latency each time. Block barriers stall
    // one block at a time while other resident blocks keep the memory system busy, so they
    // cost block_barrier_seconds (the pipeline drain a memory-bound block sees) per barrier
    // along the busiest slot's chain of passes. Rows a block handles side by side in one pass
    // share their barriers, so barriers are counted per pass, not per row.
    c.barrier_seconds = std::max(m.grid_barriers, 0) * device_.grid_barrier_seconds +
                        static_cast<double>(std::max(m.block_barriers_per_item, 0)) *
                            static_cast<double>(critical) * device_.block_barrier_seconds;
    // A split reduction's second stage: after the barrier a warp's lanes each load
    // ceil(chunks / 32) partials one after another.
    if (m.reduce_chunks > 1) {
      c.barrier_seconds +=
          static_cast<double>(CeilDiv(m.reduce_chunks, 32)) * device_.dram_latency_seconds;
    }

    c.seconds = c.memory_seconds + c.launch_seconds + c.barrier_seconds;
    return c;
  }

 private:
  // A global kernel: one launch, its phases one after another on the same co-resident grid
  // (each priced with the kernel's block, shared memory and registers, which set how many
  // blocks are resident), and a grid barrier between consecutive phases.
  KernelCost EstimateGlobal(const Graph& g, const KernelSpec& kernel) const {
    const ThreadMapping& m = kernel.mapping;
    KernelCost c;
    c.launch_seconds = device_.launch_seconds;
    c.resident_blocks_per_sm = ResidentBlocksPerSm(device_, m);
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
    c.barrier_seconds = between * device_.grid_barrier_seconds;
    double weighted_bandwidth = 0;
    for (const KernelSpec& phase : kernel.phases) {
      KernelSpec priced = phase;
      priced.mapping.shared_bytes = m.shared_bytes;
      priced.mapping.registers_per_thread = m.registers_per_thread;
      const KernelCost p = EstimateKernel(g, priced);
      c.memory_seconds += p.memory_seconds;
      c.barrier_seconds += p.barrier_seconds;
      c.global_bytes += p.global_bytes;
      weighted_bandwidth += p.bandwidth_fraction * p.memory_seconds;
    }
    c.bandwidth_fraction = c.memory_seconds > 0 ? weighted_bandwidth / c.memory_seconds : 0;
    c.seconds = c.memory_seconds + c.launch_seconds + c.barrier_seconds;
    return c;
  }

  GpuDevice device_;
};

}  // namespace

std::unique_ptr<CostModel> NewAnalyticalCostModel(const GpuDevice& device) {
  return std::make_unique<AnalyticalCostModel>(device);
}

}  // namespace stitch
