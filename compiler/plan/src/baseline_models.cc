#include "stitch/plan/baseline_models.h"

#include <algorithm>
#include <memory>

#include "int_math.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/reduction_rewrites.h"
#include "stitch/plan/stitch_planner.h"

namespace stitch {
namespace {

uint32_t Blocks(int64_t n) { return static_cast<uint32_t>(std::clamp<int64_t>(n, 1, INT32_MAX)); }

// The narrowest and widest element, in bytes, of the buffers a kernel streams over its
// `elements`-sized iteration space (smaller inputs are broadcast and come from cache).
struct StreamWidths {
  int narrowest;
  int widest;
};
StreamWidths WidthsOf(const Graph& g, const KernelSpec& k, int64_t elements) {
  StreamWidths w{16, 0};
  for (const std::vector<int>* buffers : {&k.inputs, &k.outputs}) {
    for (int id : *buffers) {
      const Shape& s = g.nodes[id].shape;
      if (s.elements() != elements) continue;
      w.narrowest = std::min(w.narrowest, DTypeBytes(s.dtype));
      w.widest = std::max(w.widest, DTypeBytes(s.dtype));
    }
  }
  if (w.widest == 0) w = {4, 4};  // no full-size buffer: price 32-bit accesses
  return w;
}

// Bytes of loads in flight per thread for one element per input, as the scheduler counted
// them for its own vector width.
int PerElementInFlight(const ThreadMapping& m, int scheduled_vector) {
  return std::max(m.load_bytes_in_flight_per_thread / std::max(scheduled_vector, 1), 1);
}

// FusionFitsInBudget (gpu_fusible.cc; BASELINE_SOURCES.md 1): at most 8 unnested reductions
// per fusion, and a shared-memory estimate within 48 KiB per block, which the column emitter's
// tile of 32 x 65 floats per output (32-bit elements, 2 per vector) fills at 5 outputs.
constexpr int kXlaMaxReductionsPerFusion = 8;
constexpr int kXlaMaxColumnReductionsPerFusion = (48 * 1024) / (4 * 32 * 65);

// Loop fusion (launch_dimensions.cc, gpu_fusible.cc ComputeLoopFusionConfig): 128 threads
// per block, unrolled (and vectorised) 4 or 2 elements per thread once the kernel has a
// thread per element for every thread slot of the GPU, one block per 128 x unroll elements.
void XlaLoopMapping(const Graph& g, KernelSpec& k, const GpuDevice& d) {
  ThreadMapping& m = k.mapping;
  const int64_t n = g.nodes[k.outputs[0]].shape.elements();
  const int per_element = PerElementInFlight(m, m.vector_width);
  int unroll = 1;
  if (n >= int64_t{d.max_threads_per_sm} * d.sms) unroll = n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1;
  const int64_t threads = std::min<int64_t>(128, std::max<int64_t>(CeilDiv(n, unroll), 1));
  m.vector_width = unroll;
  m.launch.block = {static_cast<uint32_t>(threads), 1, 1};
  m.launch.grid = {Blocks(CeilDiv(CeilDiv(n, unroll), threads)), 1, 1};
  m.load_bytes_in_flight_per_thread = per_element * unroll;
}

// Row reductions (reduction.cc, reduction_utils.cc; BASELINE_SOURCES.md 2.3): short
// power-of-two rows several to a warp (MultiRowReductionFusion); otherwise
// min(1024, roundup(N / 32, 32)) threads per row, 2 or 4 elements per vector load and up to
// 32 elements per thread, one block per row group, no grid-stride loop.
void XlaRowReduceMapping(const Graph& g, KernelSpec& k) {
  ThreadMapping& m = k.mapping;
  const Node& hero = g.nodes[k.hero];
  const int64_t rows = std::max<int64_t>(hero.shape.elements(), 1);
  const int64_t n = g.nodes[hero.operands[0]].shape.elements() / rows;
  const int per_element = PerElementInFlight(m, 1);
  const StreamWidths w = WidthsOf(g, k, rows * n);
  // 64 bits per load of the narrowest element, at most 128 bits of the widest.
  const int64_t multi_row_vector =
      std::min<int64_t>(8 / w.narrowest, w.widest >= 4 ? 16 / w.widest : 8);
  int64_t threads_per_row = 0;
  int64_t vector = 1;
  int64_t per_thread = 1;
  if (n == 0 || (n < 32 && 32 % n != 0)) {
    threads_per_row = 1;  // elemental: a thread loops over its row (of nothing, for n = 0)
    per_thread = n;
  } else if (IsPowerOfTwo(n) && n <= 32 * multi_row_vector) {
    vector = std::min<int64_t>(n, multi_row_vector);
    threads_per_row = n / vector;
  } else {
    threads_per_row = std::min<int64_t>(1024, RoundUp(CeilDiv(n, 32), 32));
    if (n % 2 == 1 || threads_per_row * 2 > n) {
      vector = 1;
    } else if (w.narrowest >= 4) {
      vector = 2;
    } else {
      vector = threads_per_row * 4 <= n && n % 4 == 0 ? 4 : 2;
    }
    per_thread = std::min<int64_t>(32 / vector, CeilDiv(n, vector * threads_per_row));
  }
  const ThreadMapping scheduled = m;
  m = ThreadMapping{};
  m.registers_per_thread = scheduled.registers_per_thread;
  m.bytes_loaded = scheduled.bytes_loaded;
  m.bytes_stored = scheduled.bytes_stored;
  m.threads_per_row = static_cast<int>(threads_per_row);
  m.work_items = rows;
  // The emitter unrolls a thread's vectors along the row, so they are loads in flight.
  m.load_bytes_in_flight_per_thread = per_element * static_cast<int>(vector * per_thread);
  if (threads_per_row <= 32) {
    // 256 threads per block, 32 / threads_per_row rows per warp.
    m.rows_per_block = static_cast<int>(256 / threads_per_row);
    m.launch.block = {32, 8, 1};
  } else {
    m.launch.block = {static_cast<uint32_t>(threads_per_row), 1, 1};
    m.shared_bytes = static_cast<uint32_t>(8 * (threads_per_row / 32) * k.outputs.size());
    m.block_barriers_per_item = 2;
  }
  m.launch.grid = {Blocks(CeilDiv(rows, m.rows_per_block)), 1, 1};
}

// Column reductions (reduction.cc ColumnReductionFusion; BASELINE_SOURCES.md 2.4): 32 x 32
// threads per block, each block owning 32 x vector kept columns (vector 2 for 32-bit
// elements, up to 4 for 16-bit ones) and looping over every reduced row.
void XlaColumnReduceMapping(const Graph& g, KernelSpec& k) {
  ThreadMapping& m = k.mapping;
  const Node& hero = g.nodes[k.hero];
  const int64_t kept = std::max<int64_t>(hero.shape.elements(), 1);
  const int64_t elements = g.nodes[hero.operands[0]].shape.elements();
  const StreamWidths w = WidthsOf(g, k, elements);
  const int64_t minor = hero.shape.rank() > 0 ? hero.shape.dims.back() : 1;
  const int64_t vector = w.narrowest >= 4 ? 2 : (minor >= 128 && minor % 4 == 0 ? 4 : 2);
  const int per_element = PerElementInFlight(m, 1);
  m.column_tile_y = 32;
  m.launch.block = {32, 32, 1};
  m.launch.grid = {Blocks(CeilDiv(kept, 32 * vector)), 1, 1};
  // A float accumulator tile of 32 x (32 * vector + 1) per reduced output (padded against bank
  // conflicts); side outputs of the fusion are written from registers.
  const auto reduced = std::count_if(k.outputs.begin(), k.outputs.end(),
                                     [&](int o) { return g.nodes[o].op == OpCode::kReduce; });
  m.shared_bytes =
      static_cast<uint32_t>(4 * 32 * (32 * vector + 1) * std::max<int64_t>(reduced, 1));
  m.block_barriers_per_item = 2;
  m.work_items = CeilDiv(kept, 32);
  m.load_bytes_in_flight_per_thread = per_element * static_cast<int>(vector);
}

// Gives the kernels XLA's native emitters would run XLA's launch rules; row-stitched kernels
// (Triton normalization fusions) keep the tiling the scheduler picked by cost, as XLA's
// tiling search picks by its cost model.
// XLA marks every kernel with its block size (nvvm.maxntid), so ptxas keeps the registers of
// a thread within what a whole block may hold and spills the rest: its kernels always launch.
void FitRegistersToBlock(ThreadMapping& m, const GpuDevice& d) {
  const int64_t threads = RoundUp(std::max<int64_t>(m.launch.block_threads(), 1), 32);
  const int64_t fit = (d.max_registers_per_block / threads) / 8 * 8;
  m.registers_per_thread =
      static_cast<int>(std::min<int64_t>(m.registers_per_thread, std::max<int64_t>(fit, 8)));
}

void ApplyXlaMappings(const Graph& g, FusionPlan& plan, const GpuDevice& d) {
  for (KernelSpec& k : plan.kernels) {
    switch (k.kind) {
      case KernelKind::kLoop:
        // A transpose keeps its tiles: XLA's transpose emitter tiles through shared memory.
        if (k.mapping.transpose_tile < 0) XlaLoopMapping(g, k, d);
        break;
      case KernelKind::kRowReduce:
        XlaRowReduceMapping(g, k);
        break;
      case KernelKind::kColumnReduce:
        XlaColumnReduceMapping(g, k);
        break;
      case KernelKind::kRowStitch:
      case KernelKind::kGlobalStitch:
        break;
    }
    FitRegistersToBlock(k.mapping, d);
  }
}

StatusOr<FusionPlan> PlanWithRules(const Graph& g, const GpuDevice& d, const FusionRules& rules,
                                   std::string name) {
  StitchPlannerOptions options;
  options.rules = rules;
  STITCH_ASSIGN_OR_RETURN(FusionPlan plan, PlanStitched(g, d, options));
  plan.planner = std::move(name);
  return plan;
}

}  // namespace

std::string_view BaselineCompilerName(BaselineCompiler compiler) {
  return compiler == BaselineCompiler::kXla ? "xla" : "inductor";
}

StatusOr<BaselinePlan> PlanXlaModel(const Graph& g, const GpuDevice& device,
                                    const XlaModelOptions& options) {
  BaselinePlan out;
  out.compiler = BaselineCompiler::kXla;
  out.graph = XlaReductionRewrites(g);
  FusionRules native;
  native.row_stitch = false;
  native.global_stitch = false;
  native.loop_rows_in_l2 = false;
  native.loop_rows_in_shared_memory = false;
  native.loop_columns_per_thread = false;
  native.loop_block_starts = false;
  native.transposed_row_tiles = false;
  native.max_reduces_per_kernel = kXlaMaxReductionsPerFusion;
  native.max_column_reduces_per_kernel = kXlaMaxColumnReductionsPerFusion;
  native.reduce_epilogues = true;
  STITCH_ASSIGN_OR_RETURN(out.plan, PlanWithRules(out.graph, device, native, "xla"));
  ApplyXlaMappings(out.graph, out.plan, device);
  if (!options.triton_normalization_fusion) return out;
  FusionRules triton = native;
  triton.row_stitch = true;
  triton.max_row_stitch_len = kXlaRowReductionBound;
  triton.row_stitch_last_dim_only = true;
  STITCH_ASSIGN_OR_RETURN(FusionPlan fused, PlanWithRules(out.graph, device, triton, "xla"));
  ApplyXlaMappings(out.graph, fused, device);
  // The rewriter fuses only where XLA's cost model finds the fusion faster.
  std::unique_ptr<CostModel> model = NewPlanningCostModel(device);
  if (model->Estimate(out.graph, fused).seconds < model->Estimate(out.graph, out.plan).seconds) {
    out.plan = std::move(fused);
  }
  return out;
}

StatusOr<BaselinePlan> PlanInductorModel(const Graph& g, const GpuDevice& device) {
  BaselinePlan out;
  out.compiler = BaselineCompiler::kInductor;
  out.graph = InductorSplitReductions(g, device.sms);
  FusionRules rules;
  rules.global_stitch = false;
  // Inductor fuses a transpose into the reduction that reads it, whatever the access order.
  rules.transposes_in_reductions = true;
  rules.loop_rows_in_l2 = false;
  rules.loop_rows_in_shared_memory = false;
  rules.loop_columns_per_thread = false;
  rules.loop_block_starts = false;
  rules.transposed_row_tiles = false;
  rules.reduce_epilogues = true;
  STITCH_ASSIGN_OR_RETURN(out.plan, PlanWithRules(out.graph, device, rules, "inductor"));
  return out;
}

StatusOr<BaselinePlan> PlanBaselineModel(BaselineCompiler compiler, const Graph& g,
                                         const GpuDevice& device, const XlaModelOptions& xla) {
  return compiler == BaselineCompiler::kXla ? PlanXlaModel(g, device, xla)
                                            : PlanInductorModel(g, device);
}

}  // namespace stitch
