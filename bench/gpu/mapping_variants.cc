#include "gpu/mapping_variants.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/schedule.h"
#include "stitch/plan/stitch_planner.h"

namespace stitch::gpu {
namespace {

// Each phase's loads per step, vector width and prefetching, in order (none for a kernel
// without phases).
std::vector<std::tuple<int, int, bool>> PhaseLoads(const KernelSpec& k) {
  std::vector<std::tuple<int, int, bool>> loads;
  for (const KernelSpec& phase : k.phases) {
    const ThreadMapping& m = phase.mapping;
    loads.emplace_back(m.loads_per_step, m.vector_width, m.prefetch_next_rows);
  }
  return loads;
}

// What makes two mappings different kernels.
auto MappingKey(const KernelSpec& k) {
  const ThreadMapping& m = k.mapping;
  return std::make_tuple(m.launch.block, m.launch.grid, m.vector_width, m.column_period,
                         m.transpose_tile, m.threads_per_row, m.values_per_thread, m.reduce_chunks,
                         m.dynamic_shared_bytes, m.loads_per_step, m.staged_row_spans,
                         PhaseLoads(k));
}

// The scheduler's candidates for `kernel`; none for kinds the sweep leaves alone.
std::vector<KernelSpec> Candidates(const Graph& g, const KernelSpec& kernel,
                                   const GpuDevice& device) {
  switch (kernel.kind) {
    case KernelKind::kLoop: {
      std::vector<KernelSpec> loops = LoopMappingCandidates(g, kernel, device);
      for (KernelSpec& tile : TransposeTileMappingCandidates(g, kernel, device)) {
        loops.push_back(std::move(tile));
      }
      for (KernelSpec& kept : KeptColumnsMappingCandidates(g, kernel, device)) {
        loops.push_back(std::move(kept));
      }
      return loops;
    }
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

// `spec` emitted, lowered and, where `assemble`, assembled as the compiler assembles what ships
// (AssembleKernel: without fused multiply-adds where they cost a block per SM or spill),
// carrying what the assembler reported into the spec's mapping as the compiler does, so the
// cost model reads it.
StatusOr<CompiledKernel> Emitted(const Graph& g, KernelSpec& spec, bool assemble,
                                 const CodegenOptions& codegen) {
  STITCH_ASSIGN_OR_RETURN(CompiledKernel kernel, EmitKernel(g, spec, codegen));
  STITCH_RETURN_IF_ERROR(LowerToPtx(kernel, codegen));
  if (assemble) {
    STITCH_RETURN_IF_ERROR(AssembleKernel(kernel, spec.mapping, codegen));
    if (kernel.assembly.reported) {
      spec.mapping.assembled_registers = kernel.assembly.registers;
      spec.mapping.assembled_instructions = kernel.assembly.instructions;
    }
  }
  return kernel;
}

// `compiled` with its kernels [first, first + span) replaced by `specs`, emitted anew.
StatusOr<CompileResult> Regrouped(const CompileResult& compiled, size_t first, size_t span,
                                  std::vector<KernelSpec> specs, const CodegenOptions& codegen) {
  const bool assemble = !compiled.kernels[first].cubin.empty();
  std::vector<CompiledKernel> kernels;
  for (KernelSpec& spec : specs) {
    STITCH_ASSIGN_OR_RETURN(CompiledKernel kernel,
                            Emitted(compiled.graph, spec, assemble, codegen));
    kernels.push_back(std::move(kernel));
  }
  CompileResult variant = compiled;
  const auto at = static_cast<std::ptrdiff_t>(first);
  const auto end = static_cast<std::ptrdiff_t>(first + span);
  variant.plan.kernels.erase(variant.plan.kernels.begin() + at, variant.plan.kernels.begin() + end);
  variant.plan.kernels.insert(variant.plan.kernels.begin() + at,
                              std::make_move_iterator(specs.begin()),
                              std::make_move_iterator(specs.end()));
  variant.kernels.erase(variant.kernels.begin() + at, variant.kernels.begin() + end);
  variant.kernels.insert(variant.kernels.begin() + at, std::make_move_iterator(kernels.begin()),
                         std::make_move_iterator(kernels.end()));
  variant.temporaries = TemporaryNodes(variant.graph, variant.plan);
  return variant;
}

// `compiled` with kernel `index` emitted anew from `spec`.
StatusOr<CompileResult> Remapped(const CompileResult& compiled, size_t index, KernelSpec spec,
                                 const CodegenOptions& codegen) {
  return Regrouped(compiled, index, 1, {std::move(spec)}, codegen);
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

StatusOr<std::vector<MappingVariant>> RegroupingVariants(const CompileResult& compiled,
                                                         const CodegenOptions& codegen) {
  if (compiled.shape_generic()) {
    return FailedPrecondition("regroupings need an exact compile, not a shape class's");
  }
  std::vector<MappingVariant> variants;
  std::map<std::pair<int, int>, int> candidates;  // per (first, span): the count so far
  for (KernelRegrouping& r :
       PhaseRegroupings(compiled.graph, compiled.plan, codegen.target.device())) {
    int& count = candidates[{r.first, r.span}];
    if (count == 0) variants.push_back({r.first, -1, compiled, r.span, r.span});
    const int kernels = static_cast<int>(r.kernels.size());
    STITCH_ASSIGN_OR_RETURN(CompileResult variant,
                            Regrouped(compiled, static_cast<size_t>(r.first),
                                      static_cast<size_t>(r.span), std::move(r.kernels), codegen));
    variants.push_back({r.first, count++, std::move(variant), r.span, kernels});
  }
  return variants;
}

StatusOr<std::vector<MappingVariant>> SweptVariants(const CompileResult& compiled,
                                                    const CodegenOptions& codegen) {
  STITCH_ASSIGN_OR_RETURN(std::vector<MappingVariant> variants, MappingVariants(compiled, codegen));
  STITCH_ASSIGN_OR_RETURN(std::vector<MappingVariant> regrouped,
                          RegroupingVariants(compiled, codegen));
  for (MappingVariant& v : regrouped) {
    const bool listed =
        v.shipped() && std::any_of(variants.begin(), variants.end(), [&](const MappingVariant& m) {
          return m.shipped() && m.kernel == v.kernel && m.span == v.span;
        });
    if (!listed) variants.push_back(std::move(v));
  }
  return variants;
}

std::string VariantText(const MappingVariant& v) {
  const std::vector<KernelSpec>& kernels = v.compiled.plan.kernels;
  const auto first = static_cast<size_t>(v.kernel);
  if (!v.regrouped()) return MappingText(kernels[first]);
  std::string text = v.shipped() ? "as shipped: " : v.kernels > v.span ? "apart: " : "joined: ";
  for (size_t k = first; k < first + static_cast<size_t>(v.kernels); ++k) {
    if (k > first) text += "; ";
    text += kernels[k].name + ": " + MappingText(kernels[k]);
  }
  return text;
}

std::string MappingText(const KernelSpec& k) {
  const ThreadMapping& m = k.mapping;
  const LaunchDims& l = m.launch;
  std::string text = std::to_string(l.block[0]) + "x" + std::to_string(l.block[1]) + " x " +
                     std::to_string(l.blocks()) + ", vector " +
                     std::to_string(std::max(m.vector_width, 1));
  if (k.kind == KernelKind::kRowStitch) {
    text += ", " + std::to_string(m.threads_per_row) + " threads per row, ";
    if (m.values_per_thread == 0) {
      text += "loop mode";
    } else if (m.dynamic_shared_bytes == 0) {
      text += std::to_string(m.values_per_thread) + " values in registers";
    } else if (m.resident_row_tile()) {
      text += std::to_string(m.values_per_thread) + " values in a resident tile of " +
              std::to_string(m.rows_per_block) + " rows, " + std::to_string(m.loads_per_step) +
              (m.loads_per_step == 1 ? " load in flight" : " loads in flight");
    } else {
      text += std::to_string(m.values_per_thread) + " values in shared memory, " +
              std::to_string(m.loads_per_step) +
              (m.loads_per_step == 1 ? " vector in flight" : " vectors in flight");
    }
  }
  if (m.staged_row_spans) text += ", rows staged in 16-byte vectors";
  if (m.column_period > 0)
    text += ", columns kept (period " + std::to_string(m.column_period) + ")";
  if (m.transpose_tile >= 0) text += ", transpose tile";
  if (k.kind == KernelKind::kLoop && m.transpose_tile >= 0 && m.loads_per_step > 1) {
    text += " of " + std::to_string(LoopTransposeTileElements(m)) + ", " +
            std::to_string(m.loads_per_step) + " vectors a thread";
  } else if (k.kind == KernelKind::kLoop && m.loads_per_step > 1) {
    text += ", " + std::to_string(m.loads_per_step) + " vectors a step";
  }
  for (const KernelSpec& phase : k.phases) {
    if (phase.mapping.prefetch_next_rows) text += ", row phase prefetching its next rows into L2";
    if (phase.kind == KernelKind::kRowReduce) {
      const int width = std::max(phase.mapping.vector_width, 1);
      text += width > 1 ? ", row phase in vectors of " + std::to_string(width)
                        : ", row phase in single elements";
    }
    if (phase.kind != KernelKind::kColumnReduce) continue;
    text += ", column lanes " + std::to_string(phase.mapping.load_bytes_in_flight_per_thread) +
            " B in flight";
  }
  return text;
}

}  // namespace stitch::gpu
