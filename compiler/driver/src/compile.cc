#include "stitch/driver/compile.h"

#include <chrono>
#include <memory>

#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/schedule.h"
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
  std::string text = o.planner == PlannerKind::kBaseline ? "planner=baseline" : "planner=stitch";
  text += o.codegen.libdevice_path.empty() ? ";math=stitch" : ";math=libdevice";
  // A bundle without cubin must not answer a request that wants one.
  text += o.codegen.emit_cubin && CubinAvailable(o.codegen) ? ";cubin=1" : ";cubin=0";
  if (o.max_persistent_grid_blocks > 0) {
    text += ";max_persistent_grid=" + std::to_string(o.max_persistent_grid_blocks);
  }
  return text;
}

// Plans `g` for `device` with the planner `options` name; every kernel comes scheduled.
StatusOr<FusionPlan> Plan(const Graph& g, const CompileOptions& options, const GpuDevice& device) {
  FusionPlan plan;
  if (options.planner == PlannerKind::kBaseline) {
    STITCH_ASSIGN_OR_RETURN(plan, PlanBaseline(g));
    STITCH_RETURN_IF_ERROR(SchedulePlan(g, plan, device));
  } else {
    STITCH_ASSIGN_OR_RETURN(plan, PlanStitched(g, device));
  }
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

// Prices `result.plan` and the baseline on `device`. A graph the baseline planner cannot
// plan is priced as the plan itself, so no saving is claimed for it.
void Price(const Graph& g, const CompileOptions& options, const GpuDevice& device,
           CompileResult& result) {
  std::unique_ptr<CostModel> model = NewAnalyticalCostModel(device);
  result.cost = model->Estimate(g, result.plan);
  result.baseline_cost = result.cost;
  if (options.planner == PlannerKind::kBaseline) return;
  StatusOr<FusionPlan> baseline = PlanBaseline(g);
  if (baseline.ok() && SchedulePlan(g, *baseline, device).ok()) {
    result.baseline_cost = model->Estimate(g, *baseline);
  }
}

}  // namespace

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
  const GpuDevice& device = options.codegen.target.device();
  STITCH_ASSIGN_OR_RETURN(result.plan, Plan(g, options, device));
  result.temporaries = TemporaryNodes(g, result.plan);
  Price(g, options, device, result);
  result.timings.plan_ms = clock.LapMs();

  for (const KernelSpec& spec : result.plan.kernels) {
    STITCH_ASSIGN_OR_RETURN(CompiledKernel kernel, EmitKernel(g, spec, options.codegen));
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
  }
  result.timings.cubin_ms = clock.LapMs();
  return result;
}

}  // namespace stitch
