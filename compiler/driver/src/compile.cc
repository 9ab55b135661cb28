#include "stitch/driver/compile.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "stitch/ir/graph_proto.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/eager_model.h"
#include "stitch/plan/layout_transposes.h"
#include "stitch/plan/learned_residual.h"
#include "stitch/plan/schedule.h"
#include "stitch/plan/statistics_rewrite.h"
#include "stitch/plan/stitch_planner.h"
#include "stitch/plan/tanh_rewrite.h"

namespace stitch {
namespace {

class Stopwatch {
 public:
  double LapMs() {
    auto now = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::string OptionsText(const CompileOptions& o) {
  // Only what changes the emitted code belongs here; paths do not, libdevice's presence does.
  std::string text = "planner=" + std::string(PlannerKindName(o.planner));
  if (!o.never_slower) text += ";always_stitch";
  text += o.codegen.libdevice_path.empty() ? ";math=stitch" : ";math=libdevice";
  // A bundle without cubin must not answer a request that wants one.
  text += o.codegen.emit_cubin && CubinAvailable(o.codegen) ? ";cubin=1" : ";cubin=0";
  if (o.max_persistent_grid_blocks > 0) {
    text += ";max_persistent_grid=" + std::to_string(o.max_persistent_grid_blocks);
  }
  if (!o.codegen.contract_products) text += ";contract=0";
  return text;
}

// The stitching planner's plan of `g`; every kernel comes scheduled.
StatusOr<FusionPlan> PlanStitchedFor(const Graph& g, const CompileOptions& options,
                                     const GpuDevice& device) {
  STITCH_ASSIGN_OR_RETURN(FusionPlan plan, PlanStitched(g, device));
  if (options.max_persistent_grid_blocks > 0) {
    // The plan is the target's; only the persistent grids shrink (and their reductions
    // are split again for the smaller grid).
    GpuDevice capped = device;
    capped.max_persistent_grid_blocks = options.max_persistent_grid_blocks;
    for (KernelSpec& k : plan.kernels) {
      if (k.kind != KernelKind::kGlobalStitch) continue;
      STITCH_RETURN_IF_ERROR(ScheduleKernel(g, k, capped));
      SizeGridToWork(g, k, capped);
    }
  }
  return plan;
}

BaselineCompiler CompilerOf(PlannerKind planner) {
  return planner == PlannerKind::kInductor ? BaselineCompiler::kInductor : BaselineCompiler::kXla;
}

// `g` serialised node for node without its names: two graphs with equal forms are the same
// graph but for names (a baseline model's rewrites rebuild the graph, naming what they leave
// as it was anew).
std::string UnnamedForm(Graph g) {
  g.name.clear();
  for (Node& n : g.nodes) n.name.clear();
  return ToBinary(g);
}

// Prices a baseline model's plan again where some of its kernels are the same code as the
// shipped plan's (assembled) ones, with their assembler's registers: the same code runs
// alike, so pricing one with the cubin's registers and the other with the scheduler's
// estimate would show a difference that is not there.
void RepriceSameCode(const CompileResult& result, const CostModel& model, BaselineEstimate& b) {
  if (!b.plan) return;
  FusionPlan priced = *b.plan;
  bool same = false;
  for (KernelSpec& k : priced.kernels) {
    for (const KernelSpec& shipped : result.plan.kernels) {
      if (shipped.mapping.assembled_registers > 0 && SameCode(k, shipped)) {
        k.mapping.assembled_registers = shipped.mapping.assembled_registers;
        same = true;
        break;
      }
    }
  }
  if (same) b.cost = model.Estimate(result.graph, priced);
}

// Gives the shipped plan's kernels what the assembler reported and prices the plan again:
// the plan was chosen on the scheduler's register estimates, and its cost now reads the
// cubin's. The other plans were never assembled and keep their estimates, but for their
// kernels that are the same code as shipped ones (RepriceSameCode). The instruction count
// stays on the plan (the calibration prices it) but out of the bundle's prices: the
// baselines have none, and an issue term on the stitched side alone would bias every saving.
void RepriceAssembled(CompileResult& result, PlannerKind requested, const GpuDevice& device) {
  bool reported = false;
  for (size_t i = 0; i < result.kernels.size(); ++i) {
    const CompiledKernel::AssemblyReport& a = result.kernels[i].assembly;
    if (!a.reported) continue;
    result.plan.kernels[i].mapping.assembled_registers = a.registers;
    result.plan.kernels[i].mapping.assembled_instructions = a.instructions;
    reported = true;
  }
  if (!reported) return;
  FusionPlan priced = result.plan;
  for (KernelSpec& k : priced.kernels) k.mapping.assembled_instructions = 0;
  const std::unique_ptr<CostModel> model = NewPricingCostModel(device);
  result.cost = model->Estimate(result.graph, priced);
  // Under kXla and kInductor the shipped plan stands for both the stitched and the baseline
  // figure; under kStitch it is one or the other.
  const bool stitched = result.shipped == PlannerKind::kStitch;
  if (stitched || requested != PlannerKind::kStitch) result.stitched_cost = result.cost;
  if (!stitched) result.baseline_cost = result.cost;
  // The better baseline, whose figure baseline_cost holds where the stitched plan ships.
  const auto better = std::find_if(
      result.baselines.begin(), result.baselines.end(),
      [&](const BaselineEstimate& b) { return b.cost.seconds == result.baseline_cost.seconds; });
  for (BaselineEstimate& b : result.baselines) RepriceSameCode(result, *model, b);
  if (stitched && better != result.baselines.end()) result.baseline_cost = better->cost;
}

// Blocks of `mapping`'s launch resident per SM at `registers` a thread.
int BlocksPerSmAt(const GpuDevice& device, ThreadMapping mapping, int registers) {
  mapping.registers_per_thread = registers;
  return ResidentBlocksPerSm(device, mapping);
}

// Local memory per thread, then blocks per SM: how a kernel's assembly fares (the fewer
// bytes, then the more blocks, the better).
std::pair<int, int> AssemblyCost(const CompiledKernel& kernel, const ThreadMapping& mapping,
                                 const GpuDevice& device) {
  const CompiledKernel::AssemblyReport& a = kernel.assembly;
  return {a.stack_bytes + a.spill_store_bytes, -BlocksPerSmAt(device, mapping, a.registers)};
}

// Whether `kernel` spills, or would fit another block per SM with one register allocation
// unit fewer a thread.
bool NearAnOccupancyStep(const CompiledKernel& kernel, const ThreadMapping& mapping,
                         const GpuDevice& device) {
  const CompiledKernel::AssemblyReport& a = kernel.assembly;
  if (a.stack_bytes + a.spill_store_bytes > 0) return true;
  constexpr int kWarpSize = 32;
  const int unit = std::max(device.register_allocation_unit / kWarpSize, 1);
  return BlocksPerSmAt(device, mapping, std::max(a.registers - unit, 1)) >
         BlocksPerSmAt(device, mapping, a.registers);
}

// The extent a shape class is planned at: odd (1 for the buckets {1} and {2}), so that no
// vector width or split relies on the run's extent being even, and next to the top, so the
// thread mapping is the one for the bucket's largest runs.
int64_t PlanningExtent(const Bucket& bucket) { return std::max<int64_t>(bucket.lo, bucket.hi - 1); }

// A planner's rewrite may put the extent into a value (the statistics rewrite's 1/n of a sum
// over the varying rows). Plans the graph again at another extent of the bucket and returns
// FAILED_PRECONDITION unless its graph, brought to the top, is `planned_top`.
Status CheckPlannedAtAnotherExtent(const Graph& g, const ShapeClass& shape_class,
                                   const Bucket& bucket, const CompileOptions& options,
                                   const Graph& planned_top) {
  const int64_t other = bucket.lo != PlanningExtent(bucket) ? bucket.lo : bucket.hi;
  if (other == PlanningExtent(bucket)) return Status::Ok();
  STITCH_ASSIGN_OR_RETURN(PlanChoice again, ChoosePlan(AtExtent(g, shape_class, other), options,
                                                       options.codegen.target.device()));
  again.graph.outer_parameters = g.outer_parameters;
  StatusOr<ShapeClass> again_class = ClassifyShapes(again.graph);
  if (!again_class.ok() ||
      CanonicalForm(AtExtent(again.graph, *again_class, bucket.hi)) != CanonicalForm(planned_top)) {
    return FailedPrecondition("the " + std::string(PlannerKindName(again.shipped)) +
                              " plan's graph differs between extents " + std::to_string(other) +
                              " and " + std::to_string(PlanningExtent(bucket)) +
                              " of the bucket: a rewrite depends on the extent");
  }
  return Status::Ok();
}

// Plans a shape-generic graph (ToShapeClass's) into `result`, with the served bucket and the
// shape class of the graph its kernels are emitted from.
Status PlanShapeClass(const Graph& g, const CompileOptions& options, CompileResult& result) {
  STITCH_ASSIGN_OR_RETURN(const ShapeClass shape_class, ClassifyShapes(g));
  Bucket bucket = BucketOf(shape_class.extent);
  bucket.lo = std::max(bucket.lo, shape_class.min_extent);
  result.served = bucket;
  const Graph planned = AtExtent(g, shape_class, PlanningExtent(bucket));
  STITCH_ASSIGN_OR_RETURN(static_cast<PlanChoice&>(result),
                          ChoosePlan(planned, options, options.codegen.target.device()));
  // The planners' rewrites add nodes but keep the parameters, so the planned graph has a
  // shape class of its own; the kernels are emitted for its top extent.
  result.graph.outer_parameters = g.outer_parameters;
  StatusOr<ShapeClass> planned_class = ClassifyShapes(result.graph);
  if (!planned_class.ok()) {
    return planned_class.status().WithContext(
        "the " + std::string(PlannerKindName(result.shipped)) + " plan's graph");
  }
  result.graph = AtExtent(result.graph, *planned_class, bucket.hi);
  STITCH_RETURN_IF_ERROR(
      CheckPlannedAtAnotherExtent(g, shape_class, bucket, options, result.graph));
  result.shape_class = std::move(*planned_class);
  result.shape_class.extent = bucket.hi;
  return Status::Ok();
}

// Emits the kernels of the plan in `result`, shape-generic when result has a shape class.
Status EmitPlanned(const CompileOptions& options, Stopwatch& clock, CompileResult& result) {
  result.temporaries = TemporaryNodes(result.graph, result.plan);
  result.timings.plan_ms += clock.LapMs();
  const ShapeClass* shape_class = result.shape_generic() ? &result.shape_class : nullptr;
  for (const KernelSpec& spec : result.plan.kernels) {
    STITCH_ASSIGN_OR_RETURN(CompiledKernel kernel,
                            EmitKernel(result.graph, spec, options.codegen, shape_class));
    result.kernels.push_back(std::move(kernel));
  }
  result.timings.emit_ms += clock.LapMs();
  return Status::Ok();
}

// Plans an exact graph into `result` and emits its kernels.
Status PlanAndEmit(const Graph& g, const CompileOptions& options, Stopwatch& clock,
                   CompileResult& result) {
  STITCH_ASSIGN_OR_RETURN(static_cast<PlanChoice&>(result),
                          ChoosePlan(g, options, options.codegen.target.device()));
  return EmitPlanned(options, clock, result);
}

// As PlanAndEmit, for a shape-generic graph: its kernels take the run's extent. Sets
// result.served to the bucket before anything can fail.
Status PlanAndEmitShapeClass(const Graph& g, const CompileOptions& options, Stopwatch& clock,
                             CompileResult& result) {
  STITCH_RETURN_IF_ERROR(PlanShapeClass(g, options, result));
  return EmitPlanned(options, clock, result);
}

// Plans `g`, as rewritten before planning, with the planners `options` names: see
// ChoosePlan.
StatusOr<PlanChoice> ChooseAmongPlanners(const Graph& g, const CompileOptions& options,
                                         const GpuDevice& device) {
  PlanChoice result;
  // The model stitchd prices with: the analytical model of kCurrentCostModel, with the learned
  // correction only where its table ships for this device (learned_residual.h).
  std::unique_ptr<CostModel> model = NewPricingCostModel(device);
  // Which plan ships is chosen on the prices of the device the plans were searched for
  // (PlanningDevice, cost_model.h): on an H200, the choices its measured plans were made
  // with. What the bundle reports is priced on the device itself.
  const GpuDevice& planning_device = PlanningDevice(device);
  std::unique_ptr<CostModel> choosing =
      &planning_device == &device ? nullptr : NewPricingCostModel(planning_device);
  const auto choice_seconds = [&](const Graph& graph, const FusionPlan& plan,
                                  const PlanCost& priced) {
    return choosing ? choosing->Estimate(graph, plan).seconds : priced.seconds;
  };
  double baseline_choice_seconds = 0;
  XlaModelOptions xla;
  xla.triton_normalization_fusion = options.codegen.target.compute_capability() >= 80;
  std::optional<BaselinePlan> best;
  // Kernels of two plans are the same code only over the same graph.
  const std::string graph_form = UnnamedForm(g);
  bool best_is_same_graph = false;
  for (BaselineCompiler compiler : {BaselineCompiler::kXla, BaselineCompiler::kInductor}) {
    StatusOr<BaselinePlan> b = PlanBaselineModel(compiler, g, device, xla);
    const bool requested =
        options.planner != PlannerKind::kStitch && CompilerOf(options.planner) == compiler;
    if (!b.ok()) {
      // A model that cannot plan the graph claims nothing; asked for by name, it is an error.
      if (requested) return std::move(b).status();
      continue;
    }
    const PlanCost cost = model->Estimate(b->graph, b->plan);
    const double seconds = choice_seconds(b->graph, b->plan, cost);
    result.baselines.push_back({compiler, cost, std::nullopt});
    const bool same_graph = UnnamedForm(b->graph) == graph_form;
    if (same_graph) result.baselines.back().plan = b->plan;
    if (requested ||
        (options.planner == PlannerKind::kStitch && (!best || seconds < baseline_choice_seconds))) {
      result.baseline_cost = cost;
      baseline_choice_seconds = seconds;
      best = std::move(*b);
      best_is_same_graph = same_graph;
    }
  }
  if (StatusOr<FusionPlan> eager = PlanEagerModel(g, device); eager.ok()) {
    result.eager_cost = model->Estimate(g, *eager);
  }
  // A baseline plan of another graph than the compiled one ships: no other plan's kernel is
  // its code.
  const auto keep_plans_of_shipped_graph = [&] {
    if (best_is_same_graph) return;
    for (BaselineEstimate& b : result.baselines) b.plan.reset();
  };
  if (options.planner != PlannerKind::kStitch) {
    result.shipped = options.planner;
    result.graph = std::move(best->graph);
    result.plan = std::move(best->plan);
    result.cost = result.stitched_cost = result.baseline_cost;
    keep_plans_of_shipped_graph();
    return result;
  }
  STITCH_ASSIGN_OR_RETURN(FusionPlan stitched, PlanStitchedFor(g, options, device));
  result.stitched_cost = model->Estimate(g, stitched);
  if (options.never_slower && best && !best->plan.kernels.empty() &&
      baseline_choice_seconds < choice_seconds(g, stitched, result.stitched_cost)) {
    result.shipped =
        best->compiler == BaselineCompiler::kXla ? PlannerKind::kXla : PlannerKind::kInductor;
    result.graph = std::move(best->graph);
    result.plan = std::move(best->plan);
    result.cost = result.baseline_cost;
    keep_plans_of_shipped_graph();
    return result;
  }
  if (!best) result.baseline_cost = result.stitched_cost;
  result.graph = g;
  result.plan = std::move(stitched);
  result.cost = result.stitched_cost;
  return result;
}

}  // namespace

StatusOr<PlanChoice> ChoosePlan(const Graph& input, const CompileOptions& options,
                                const GpuDevice& device) {
  // Values behind layout transposes computed in their inputs' stored order, for every
  // planner: XLA assigns layouts before it fuses, and Inductor computes channels-last tensors
  // in their storage order, so neither reads a stored NHWC tensor through a transpose.
  // Statistics in one pass, for every planner: XLA lowers batch norm to E[x^2] - E[x]^2
  // (batchnorm_expander.cc) and Inductor's var_mean is a Welford reduction, so neither reads
  // the input twice for a variance; the shifted sums give stitched plans the same single pass.
  // 1 + tanh(z) as 2 logistic(2z) (tanh_rewrite.h), for every planner too: it changes how an
  // element is computed, not what any kernel reads or writes, so every plan computes it with
  // fewer instructions (the baseline models' prices with them, which only understates what
  // stitching gains) and without the sum's cancellation.
  const auto rewritten = [](const Graph& g) {
    return OnePlusTanhAsLogistic(OnePassStatisticsRewrite(g));
  };
  const LayoutTransposeFold fold = FoldLayoutTransposes(input);
  StatusOr<PlanChoice> folded = ChooseAmongPlanners(rewritten(fold.graph), options, device);
  if (fold.folded == 0 || options.planner != PlannerKind::kStitch || !folded.ok()) {
    return folded;
  }
  // The fold is a choice of the graph to plan, not always the cheaper one: where the plans
  // of the graph as it came price lower (a region small enough to be bound by its launches,
  // where the folded graph plans a kernel more), those ship, so that folding never makes
  // what ships slower.
  StatusOr<PlanChoice> as_given = ChooseAmongPlanners(rewritten(input), options, device);
  if (as_given.ok() && as_given->cost.seconds < folded->cost.seconds) return as_given;
  return folded;
}

std::string_view PlannerKindName(PlannerKind planner) {
  switch (planner) {
    case PlannerKind::kStitch:
      return "stitch";
    case PlannerKind::kXla:
      return "xla";
    case PlannerKind::kInductor:
      return "inductor";
  }
  return "stitch";
}

KeyContext KeyContextFor(const CompileOptions& options) {
  KeyContext k;
  k.target = options.codegen.target.name();
  k.options = OptionsText(options);
  k.salt = options.salt;
  return k;
}

StatusOr<CompileResult> CompileGraph(const Graph& input, const CompileOptions& options) {
  STITCH_RETURN_IF_ERROR(Verify(input, options.limits));
  Stopwatch clock;
  Bucket served;
  const Graph g = ToShapeClass(input, &served);
  CacheKey key = ComputeKey(g, KeyContextFor(options));
  const double key_ms = clock.LapMs();
  STITCH_ASSIGN_OR_RETURN(CompileResult result, CompileVerifiedGraph(g, std::move(key), options));
  result.timings.verify_ms += key_ms;
  return result;
}

StatusOr<CompileResult> CompileVerifiedGraph(const Graph& g, CacheKey key,
                                             const CompileOptions& options) {
  CompileResult result;
  result.key = std::move(key);
  Stopwatch clock;
  if (!g.outer_parameters.empty()) {
    Status generic = PlanAndEmitShapeClass(g, options, clock, result);
    if (!generic.ok()) {
      // A planner's rewrite or a kernel kind that cannot follow the extent: the key's
      // bundle then serves the top extent alone, and says so (served).
      const int64_t hi = result.served.hi > 0
                             ? result.served.hi
                             : g.nodes[g.Parameters()[g.outer_parameters[0]]].shape.dims[0];
      const Bucket top{hi, hi};
      result = CompileResult{};
      result.key = std::move(key);
      Graph exact = g;
      exact.outer_parameters.clear();
      STITCH_RETURN_IF_ERROR(PlanAndEmit(exact, options, clock, result));
      result.served = top;
      result.graph.outer_parameters = g.outer_parameters;  // as named, for the bundle
      result.not_generic = generic.message();
    }
  } else {
    STITCH_RETURN_IF_ERROR(PlanAndEmit(g, options, clock, result));
  }
  if (!options.emit_ptx) return result;

  for (CompiledKernel& kernel : result.kernels) {
    STITCH_RETURN_IF_ERROR(LowerToPtx(kernel, options.codegen));
  }
  result.timings.ptx_ms = clock.LapMs();

  if (!options.codegen.emit_cubin) {
    result.cubin_note = "cubin not requested";
  } else if (!CubinAvailable(options.codegen)) {
    result.cubin_note = "PTX-only mode: no nvJitLink or ptxas in this build";
  } else {
    for (size_t i = 0; i < result.kernels.size(); ++i) {
      STITCH_RETURN_IF_ERROR(
          AssembleKernel(result.kernels[i], result.plan.kernels[i].mapping, options.codegen));
    }
    RepriceAssembled(result, options.planner, options.codegen.target.device());
  }
  result.timings.cubin_ms = clock.LapMs();
  return result;
}

// A fused multiply-add keeps its product's factors live until the sum, and ptxas may then take
// a few more registers than the unfused kernel: #1's row kernel 65 where 59 kept four blocks an
// SM, #2's 34 where 32 kept sixteen; under a grid barrier's register cap #20's spilled.
Status AssembleKernel(CompiledKernel& kernel, const ThreadMapping& mapping,
                      const CodegenOptions& options) {
  STITCH_RETURN_IF_ERROR(AssembleCubin(kernel, options));
  const GpuDevice& device = options.target.device();
  if (!options.contract_products || !kernel.assembly.reported ||
      !NearAnOccupancyStep(kernel, mapping, device)) {
    return Status::Ok();
  }
  CodegenOptions unfused = options;
  unfused.contract_products = false;
  CompiledKernel again = kernel;
  STITCH_RETURN_IF_ERROR(LowerToPtx(again, unfused));
  STITCH_RETURN_IF_ERROR(AssembleCubin(again, unfused));
  if (AssemblyCost(again, mapping, device) < AssemblyCost(kernel, mapping, device)) {
    kernel = std::move(again);
  }
  return Status::Ok();
}

}  // namespace stitch
