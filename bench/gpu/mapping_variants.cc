#include "gpu/mapping_variants.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "stitch/plan/schedule.h"

namespace stitch::gpu {
namespace {

// Each phase's loads per step, in order (none for a kernel without phases).
std::vector<int> PhaseLoads(const KernelSpec& k) {
  std::vector<int> loads;
  for (const KernelSpec& phase : k.phases) loads.push_back(phase.mapping.loads_per_step);
  return loads;
}

// What makes two mappings different kernels.
auto MappingKey(const KernelSpec& k) {
  const ThreadMapping& m = k.mapping;
  return std::make_tuple(m.launch.block, m.launch.grid, m.vector_width, m.column_period,
                         m.transpose_tile, m.threads_per_row, m.values_per_thread, m.reduce_chunks,
                         PhaseLoads(k));
}

// The scheduler's candidates for `kernel`; none for kinds the sweep leaves alone.
std::vector<KernelSpec> Candidates(const Graph& g, const KernelSpec& kernel,
                                   const GpuDevice& device) {
  switch (kernel.kind) {
    case KernelKind::kLoop:
      return LoopMappingCandidates(g, kernel, device);
    case KernelKind::kRowStitch:
      return RowStitchMappingCandidates(g, kernel, device);
    case KernelKind::kGlobalStitch:
      return GlobalStitchMappingCandidates(g, kernel, device);
    case KernelKind::kColumnReduce:
      return SplitColumnReduceCandidates(g, kernel, device);
    default:
      return {};
  }
}

// `compiled` with kernel `index` emitted anew from `spec`, carrying what the assembler
// reported into the spec's mapping as the compiler does, so the cost model reads it.
StatusOr<CompileResult> Remapped(const CompileResult& compiled, size_t index, KernelSpec spec,
                                 const CodegenOptions& codegen) {
  STITCH_ASSIGN_OR_RETURN(CompiledKernel kernel, EmitKernel(compiled.graph, spec, codegen));
  STITCH_RETURN_IF_ERROR(LowerToPtx(kernel, codegen));
  if (!compiled.kernels[index].cubin.empty()) {
    STITCH_RETURN_IF_ERROR(AssembleCubin(kernel, codegen));
    if (kernel.assembly.reported) {
      spec.mapping.assembled_registers = kernel.assembly.registers;
      spec.mapping.assembled_instructions = kernel.assembly.instructions;
    }
  }
  CompileResult variant = compiled;
  variant.plan.kernels[index] = std::move(spec);
  variant.kernels[index] = std::move(kernel);
  return variant;
}

}  // namespace

StatusOr<std::vector<MappingVariant>> MappingVariants(const CompileResult& compiled,
                                                      const CodegenOptions& codegen) {
  if (compiled.shape_generic()) {
    return FailedPrecondition("mapping variants need an exact compile, not a shape class's");
  }
  std::vector<MappingVariant> variants;
  const GpuDevice& device = codegen.target.device();
  for (size_t i = 0; i < compiled.plan.kernels.size(); ++i) {
    const KernelSpec& own = compiled.plan.kernels[i];
    const std::vector<KernelSpec> candidates = Candidates(compiled.graph, own, device);
    if (candidates.empty()) continue;
    variants.push_back({static_cast<int>(i), -1, compiled});
    std::vector<decltype(MappingKey(own))> seen{MappingKey(own)};
    for (size_t c = 0; c < candidates.size(); ++c) {
      const auto key = MappingKey(candidates[c]);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      STITCH_ASSIGN_OR_RETURN(CompileResult variant, Remapped(compiled, i, candidates[c], codegen));
      variants.push_back({static_cast<int>(i), static_cast<int>(c), std::move(variant)});
    }
  }
  return variants;
}

std::string MappingText(const KernelSpec& k) {
  const ThreadMapping& m = k.mapping;
  const LaunchDims& l = m.launch;
  std::string text = std::to_string(l.block[0]) + "x" + std::to_string(l.block[1]) + " x " +
                     std::to_string(l.blocks()) + ", vector " +
                     std::to_string(std::max(m.vector_width, 1));
  if (k.kind == KernelKind::kRowStitch) {
    text += ", " + std::to_string(m.threads_per_row) + " threads per row, " +
            (m.values_per_thread > 0 ? std::to_string(m.values_per_thread) + " values in registers"
                                     : std::string("loop mode"));
  }
  if (m.column_period > 0)
    text += ", columns kept (period " + std::to_string(m.column_period) + ")";
  if (m.transpose_tile >= 0) text += ", transpose tile";
  for (const KernelSpec& phase : k.phases) {
    if (phase.kind != KernelKind::kColumnReduce) continue;
    text += ", column lanes " + std::to_string(phase.mapping.load_bytes_in_flight_per_thread) +
            " B in flight";
  }
  return text;
}

}  // namespace stitch::gpu
