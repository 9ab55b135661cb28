#include "stitch/plan/schedule.h"

#include "schedule_internal.h"

namespace stitch {

Status ScheduleKernel(const Graph& g, KernelSpec& kernel, const GpuDevice& device) {
  if (kernel.outputs.empty()) return InvalidArgument("kernel " + kernel.name + " has no outputs");
  const int n = static_cast<int>(g.nodes.size());
  if (kernel.kind != KernelKind::kLoop && kernel.kind != KernelKind::kGlobalStitch &&
      (kernel.hero < 0 || kernel.hero >= n || g.nodes[kernel.hero].op != OpCode::kReduce)) {
    return InvalidArgument("kernel " + kernel.name + ": the hero is not a reduce node");
  }
  switch (kernel.kind) {
    case KernelKind::kLoop:
      internal::ScheduleStandaloneLoop(g, kernel, device);
      return Status::Ok();
    case KernelKind::kRowReduce:
      internal::ScheduleRowReduce(g, kernel, device);
      return Status::Ok();
    case KernelKind::kColumnReduce:
      internal::ScheduleColumnReduce(g, kernel, device);
      return Status::Ok();
    case KernelKind::kRowStitch:
      return internal::ScheduleRowStitch(g, kernel, device);
    case KernelKind::kGlobalStitch:
      return internal::ScheduleGlobalStitch(g, kernel, device);
  }
  return InvalidArgument("kernel " + kernel.name + " has an unknown kind");
}

Status SchedulePlan(const Graph& g, FusionPlan& plan, const GpuDevice& device) {
  for (KernelSpec& k : plan.kernels) STITCH_RETURN_IF_ERROR(ScheduleKernel(g, k, device));
  return Status::Ok();
}

}  // namespace stitch
