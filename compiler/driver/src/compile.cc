#include "stitch/driver/compile.h"

#include <chrono>
#include <memory>
#include <optional>

#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/eager_model.h"
#include "stitch/plan/schedule.h"
#include "stitch/plan/statistics_rewrite.h"
#include "stitch/plan/stitch_planner.h"

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

// Gives the shipped plan's kernels what the assembler reported and prices the plan again:
// the plan was chosen on the scheduler's register estimates, and its cost now reads the
// cubin's. The other plans were never assembled and keep their estimates.
void RepriceAssembled(CompileResult& result, PlannerKind requested, const GpuDevice& device) {
  bool reported = false;
  for (size_t i = 0; i < result.kernels.size(); ++i) {
    const CompiledKernel::AssemblyReport& a = result.kernels[i].assembly;
    if (!a.reported) continue;
    result.plan.kernels[i].mapping.assembled_registers = a.registers;
    reported = true;
  }
  if (!reported) return;
  result.cost = NewAnalyticalCostModel(device)->Estimate(result.graph, result.plan);
  // Under kXla and kInductor the shipped plan stands for both the stitched and the baseline
  // figure; under kStitch it is one or the other.
  const bool stitched = result.shipped == PlannerKind::kStitch;
  if (stitched || requested != PlannerKind::kStitch) result.stitched_cost = result.cost;
  if (!stitched) result.baseline_cost = result.cost;
}

}  // namespace

StatusOr<PlanChoice> ChoosePlan(const Graph& input, const CompileOptions& options,
                                const GpuDevice& device) {
  // Statistics in one pass, for every planner: XLA lowers batch norm to E[x^2] - E[x]^2
  // (batchnorm_expander.cc) and Inductor's var_mean is a Welford reduction, so neither reads
  // the input twice for a variance; the shifted sums give stitched plans the same single pass.
  const Graph g = OnePassStatisticsRewrite(input);
  PlanChoice result;
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device);
  XlaModelOptions xla;
  xla.triton_normalization_fusion = options.codegen.target.compute_capability() >= 80;
  std::optional<BaselinePlan> best;
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
    result.baselines.push_back({compiler, cost});
    if (requested || (options.planner == PlannerKind::kStitch &&
                      (!best || cost.seconds < result.baseline_cost.seconds))) {
      result.baseline_cost = cost;
      best = std::move(*b);
    }
  }
  if (StatusOr<FusionPlan> eager = PlanEagerModel(g, device); eager.ok()) {
    result.eager_cost = model->Estimate(g, *eager);
  }
  if (options.planner != PlannerKind::kStitch) {
    result.shipped = options.planner;
    result.graph = std::move(best->graph);
    result.plan = std::move(best->plan);
    result.cost = result.stitched_cost = result.baseline_cost;
    return result;
  }
  STITCH_ASSIGN_OR_RETURN(FusionPlan stitched, PlanStitchedFor(g, options, device));
  result.stitched_cost = model->Estimate(g, stitched);
  if (options.never_slower && best && !best->plan.kernels.empty() &&
      result.baseline_cost.seconds < result.stitched_cost.seconds) {
    result.shipped =
        best->compiler == BaselineCompiler::kXla ? PlannerKind::kXla : PlannerKind::kInductor;
    result.graph = std::move(best->graph);
    result.plan = std::move(best->plan);
    result.cost = result.baseline_cost;
    return result;
  }
  if (!best) result.baseline_cost = result.stitched_cost;
  result.graph = g;
  result.plan = std::move(stitched);
  result.cost = result.stitched_cost;
  return result;
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

StatusOr<CompileResult> CompileGraph(const Graph& g, const CompileOptions& options) {
  STITCH_RETURN_IF_ERROR(Verify(g, options.limits));
  Stopwatch clock;
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
  STITCH_ASSIGN_OR_RETURN(static_cast<PlanChoice&>(result),
                          ChoosePlan(g, options, options.codegen.target.device()));
  result.temporaries = TemporaryNodes(result.graph, result.plan);
  result.timings.plan_ms = clock.LapMs();

  for (const KernelSpec& spec : result.plan.kernels) {
    STITCH_ASSIGN_OR_RETURN(CompiledKernel kernel, EmitKernel(result.graph, spec, options.codegen));
    result.kernels.push_back(std::move(kernel));
  }
  result.timings.emit_ms = clock.LapMs();
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
    for (CompiledKernel& kernel : result.kernels) {
      STITCH_RETURN_IF_ERROR(AssembleCubin(kernel, options.codegen));
    }
    RepriceAssembled(result, options.planner, options.codegen.target.device());
  }
  result.timings.cubin_ms = clock.LapMs();
  return result;
}

}  // namespace stitch
