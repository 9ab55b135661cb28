#include "stitch/compiler/compile.h"

#include <chrono>

#include "stitch/compiler/baseline_planner.h"
#include "stitch/compiler/gpu_device.h"
#include "stitch/compiler/schedule.h"
#include "stitch/compiler/stitch_planner.h"
#include "stitch/compiler/verifier.h"

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

}  // namespace

KeyContext KeyContextFor(const CompileOptions& options) {
  KeyContext k;
  k.target = options.codegen.target;
  k.options = OptionsText(options);
  k.salt = options.salt;
  return k;
}

StatusOr<CompileResult> CompileGraph(const Graph& g, const CompileOptions& options) {
  CompileResult result;
  Stopwatch clock;
  STITCH_RETURN_IF_ERROR(Verify(g, options.limits));
  result.key = ComputeKey(g, KeyContextFor(options));
  result.timings.verify_ms = clock.LapMs();

  const GpuDevice& device = DeviceForTarget(options.codegen.target);
  if (options.planner == PlannerKind::kBaseline) {
    STITCH_ASSIGN_OR_RETURN(result.plan, PlanBaseline(g));
    STITCH_RETURN_IF_ERROR(SchedulePlan(g, result.plan, device));
  } else {
    STITCH_ASSIGN_OR_RETURN(result.plan, PlanStitched(g, device));
  }
  if (options.max_persistent_grid_blocks > 0) {
    // The plan is the target's; only the persistent grids shrink (and their reductions
    // are split again for the smaller grid).
    GpuDevice capped = device;
    capped.max_persistent_grid_blocks = options.max_persistent_grid_blocks;
    for (KernelSpec& k : result.plan.kernels) {
      if (k.kind == KernelKind::kGlobalStitch) STITCH_RETURN_IF_ERROR(ScheduleKernel(g, k, capped));
    }
  }
  result.temporaries = TemporaryNodes(g, result.plan);
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
