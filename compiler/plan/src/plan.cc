#include "stitch/plan/plan.h"

#include <sstream>
#include <utility>

#include "stitch/ir/aliasing.h"

namespace stitch {

std::string_view KernelKindName(KernelKind k) {
  switch (k) {
    case KernelKind::kLoop:
      return "loop";
    case KernelKind::kRowReduce:
      return "row_reduce";
    case KernelKind::kColumnReduce:
      return "column_reduce";
    case KernelKind::kRowStitch:
      return "row_stitch";
    case KernelKind::kGlobalStitch:
      return "global_stitch";
  }
  return "invalid";
}

std::string_view StitchSchemeName(StitchScheme s) {
  switch (s) {
    case StitchScheme::kIndependent:
      return "independent";
    case StitchScheme::kLocal:
      return "local";
    case StitchScheme::kRegional:
      return "regional";
    case StitchScheme::kGlobal:
      return "global";
  }
  return "invalid";
}

namespace {

void DescribeMapping(const ThreadMapping& m, std::ostringstream& out) {
  out << " grid=" << m.launch.grid[0] << " block=" << m.launch.block[0] << "x" << m.launch.block[1];
  if (m.threads_per_row != 32 || m.rows_per_block != 1) {
    out << " threads/row=" << m.threads_per_row << " rows/block=" << m.rows_per_block;
  }
  if (m.values_per_thread > 0) {
    out << (m.dynamic_shared_bytes > 0 ? " smem_values/row=" : " regs/row=") << m.values_per_thread;
  }
  if (m.vector_width > 1) out << " vec=" << m.vector_width;
  if (m.rescaled_sums_in_one_pass) out << " online_sums";
  if (m.staged_row_spans) out << " staged_spans";
  if (m.prefetch_next_rows) out << " prefetch_rows";
  if (m.transpose_tile >= 0) out << " transpose_tile=%" << m.transpose_tile;
  if (m.column_period > 0) out << " column_period=" << m.column_period;
  if (m.loads_per_step > 1) out << " loads/step=" << m.loads_per_step;
  if (m.reduce_chunks > 1) {
    out << " chunks=" << m.reduce_chunks;
    if (m.split_combine == ThreadMapping::SplitCombine::kLastBlock) out << " combine=last_block";
  }
  if (m.shared_bytes > 0) out << " smem=" << m.shared_bytes;
  if (m.dynamic_shared_bytes > 0) out << " dynamic_smem=" << m.dynamic_shared_bytes;
  if (m.grid_barriers > 0) out << " grid_barriers=" << m.grid_barriers;
}

void DescribeKernel(const Graph& g, const KernelSpec& k, const std::string& indent,
                    std::ostringstream& out) {
  out << indent << k.name << " [" << KernelKindName(k.kind) << "]";
  if (k.hero >= 0) out << " hero=%" << k.hero << " (" << g.nodes[k.hero].shape.ToString() << ")";
  out << " nodes=" << k.nodes.size() << " reads={";
  for (size_t i = 0; i < k.inputs.size(); ++i) out << (i ? ",%" : "%") << k.inputs[i];
  out << "} writes={";
  for (size_t i = 0; i < k.outputs.size(); ++i) out << (i ? ",%" : "%") << k.outputs[i];
  out << "}";
  if (k.mapping.launch.blocks() > 0 && k.mapping.work_items > 0) DescribeMapping(k.mapping, out);
  out << "\n";
  for (const StitchEdge& e : k.edges) {
    out << indent << "  %" << e.producer << " -> %" << e.consumer << " "
        << StitchSchemeName(e.scheme) << "\n";
  }
  for (const KernelSpec& phase : k.phases) DescribeKernel(g, phase, indent + "  | ", out);
}

}  // namespace

namespace {

// `k` without what SameCode leaves out of the comparison.
KernelSpec CodeOf(KernelSpec k) {
  k.name.clear();
  k.edges.clear();
  k.mapping.assembled_registers = 0;
  k.mapping.assembled_instructions = 0;
  k.mapping.estimated_instructions = 0;
  for (KernelSpec& phase : k.phases) phase = CodeOf(std::move(phase));
  return k;
}

}  // namespace

bool SameCode(const KernelSpec& a, const KernelSpec& b) { return CodeOf(a) == CodeOf(b); }

std::string Describe(const Graph& g, const FusionPlan& plan) {
  std::ostringstream out;
  out << plan.planner << " plan: " << plan.kernels.size() << " kernel(s)\n";
  for (const KernelSpec& k : plan.kernels) DescribeKernel(g, k, "  ", out);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int64_t input = AliasedParameter(g, g.outputs[i]);
    if (input >= 0) {
      out << "  output " << i << " is input " << input << "'s bytes: no kernel writes it\n";
    }
  }
  return out.str();
}

}  // namespace stitch
