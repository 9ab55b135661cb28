// The global stitching scheme: one persistent grid runs several loop nests (phases) in
// turn. A phase's outputs reach later phases through global memory; the grid barrier
// between phases makes them visible to every block.
#include <algorithm>
#include <unordered_map>

#include "emitters.h"
#include "grid_barrier.h"

namespace stitch::codegen {
namespace {

Status CheckPhase(const KernelContext& kc, const KernelSpec& phase) {
  const std::string k = "kernel " + kc.spec.name + ", phase " + phase.name;
  if (phase.kind == KernelKind::kGlobalStitch || !phase.phases.empty()) {
    return InvalidArgument(k + ": phases cannot have phases of their own");
  }
  if (phase.mapping.launch.block_threads() != kc.spec.mapping.launch.block_threads() ||
      phase.mapping.launch.block[2] != 1) {
    return InvalidArgument(
        k + ": its block of " + std::to_string(phase.mapping.launch.block_threads()) +
        " threads is not the kernel's " + std::to_string(kc.spec.mapping.launch.block_threads()));
  }
  if (phase.mapping.launch.grid != kc.spec.mapping.launch.grid) {
    return InvalidArgument(k + ": its grid is not the kernel's");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<EmittedNest> EmitGlobalStitchKernel(KernelContext& kc) {
  const KernelSpec& spec = kc.spec;
  if (kc.workspace == nullptr) return Internal("kernel " + spec.name + " has no workspace");
  if (spec.mapping.launch.block[1] != 1 || spec.mapping.launch.block[2] != 1) {
    return InvalidArgument("kernel " + spec.name + ": a global_stitch block is one-dimensional");
  }
  EmittedNest nest;
  nest.launch = spec.mapping.launch;
  nest.workspace_end = kGridBarrierWorkspaceBytes;
  std::unordered_map<int, llvm::Value*> written;
  for (size_t o = 0; o < spec.outputs.size(); ++o) written[spec.outputs[o]] = kc.output_buffers[o];
  std::unordered_map<int, llvm::Value*> readable = kc.buffers;
  for (size_t p = 0; p < spec.phases.size(); ++p) {
    const KernelSpec& phase = spec.phases[p];
    STITCH_RETURN_IF_ERROR(CheckPhase(kc, phase));
    if (p > 0) GridBarrier(kc, kc.workspace);
    KernelContext sub{kc.graph, phase, kc.options, kc.ctx, kc.module, kc.fn, kc.b, {}, {}};
    sub.index_ty = kc.index_ty;
    sub.shape_class = kc.shape_class;
    sub.outer_extent = kc.outer_extent;
    sub.approximate_math = kc.approximate_math;
    sub.logical_block = {phase.mapping.launch.block[0], phase.mapping.launch.block[1]};
    sub.workspace = kc.workspace;
    sub.workspace_offset = nest.workspace_end;
    for (int in : phase.inputs) {
      auto it = readable.find(in);
      if (it == readable.end()) {
        return InvalidArgument("kernel " + spec.name + ", phase " + phase.name + " reads " +
                               DescribeNode(kc.graph, in) +
                               ", which is neither a kernel input nor written by an earlier phase");
      }
      sub.buffers[in] = it->second;
    }
    for (int out : phase.outputs) {
      auto it = written.find(out);
      if (it == written.end()) {
        return InvalidArgument("kernel " + spec.name + ", phase " + phase.name + " writes " +
                               DescribeNode(kc.graph, out) + ", which is not a kernel output");
      }
      sub.output_buffers.push_back(it->second);
    }
    StatusOr<EmittedNest> phase_nest = EmitNest(sub);
    if (!phase_nest.ok()) return phase_nest.status().WithContext("phase " + phase.name);
    nest.shared_bytes += phase_nest->shared_bytes;
    nest.workspace_end = std::max(nest.workspace_end, phase_nest->workspace_end);
    for (int out : phase.outputs) readable[out] = written[out];
  }
  return nest;
}

}  // namespace stitch::codegen
