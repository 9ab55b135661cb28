#include "stitch/driver/bundle.h"

#include <algorithm>

#include "stitch/ir/aliasing.h"
#include "stitch/ir/key.h"
#include "stitch/plan/cost_model.h"

namespace stitch {
namespace {

// Alignment of temporary buffers: what cudaMalloc guarantees, so a job can carve all of
// them out of one allocation.
constexpr uint32_t kTemporaryAlignment = 256;

v1::KernelParam ParamFor(const Graph& g, const CompileResult& result, int node) {
  v1::KernelParam p;
  const Node& n = g.nodes[static_cast<size_t>(node)];
  if (n.op == OpCode::kParameter) {
    p.set_role(v1::KernelParam::INPUT);
    p.set_index(static_cast<int32_t>(n.parameter_number));
    return p;
  }
  auto out = std::find(g.outputs.begin(), g.outputs.end(), node);
  if (out != g.outputs.end()) {
    p.set_role(v1::KernelParam::OUTPUT);
    p.set_index(static_cast<int32_t>(out - g.outputs.begin()));
    return p;
  }
  auto tmp = std::find(result.temporaries.begin(), result.temporaries.end(), node);
  p.set_role(v1::KernelParam::TEMPORARY);
  p.set_index(static_cast<int32_t>(tmp - result.temporaries.begin()));
  return p;
}

void FillKernel(const Graph& g, const CompileResult& result, const CompiledKernel& k,
                v1::Kernel& out) {
  out.set_name(k.name);
  out.set_ptx(k.ptx);
  out.set_cubin(k.cubin);
  out.set_kind(std::string(KernelKindName(k.kind)));
  out.set_static_shared_bytes(k.shared_bytes);
  out.set_dynamic_shared_bytes(k.dynamic_shared_bytes);
  out.set_workspace_bytes(k.workspace_bytes);
  out.set_cooperative(k.cooperative);
  out.set_takes_outer_extent(k.takes_outer_extent);
  v1::LaunchDims& l = *out.mutable_launch();
  l.set_grid_x(k.launch.grid[0]);
  l.set_grid_y(k.launch.grid[1]);
  l.set_grid_z(k.launch.grid[2]);
  l.set_block_x(k.launch.block[0]);
  l.set_block_y(k.launch.block[1]);
  l.set_block_z(k.launch.block[2]);
  for (int node : k.param_nodes) *out.add_params() = ParamFor(g, result, node);
}

// Bytes of `node`'s buffer per unit of the outer extent; 0 when its size is fixed.
uint64_t BytesPerExtent(const CompileResult& result, int node) {
  if (!result.shape_generic() || !result.shape_class.Varies(node)) return 0;
  const Shape& s = result.graph.nodes[static_cast<size_t>(node)].shape;
  return static_cast<uint64_t>(s.bytes() / result.shape_class.extent);
}

void FillBufferSpec(const CompileResult& result, int node, v1::BufferSpec& out) {
  const Shape& s = result.graph.nodes[static_cast<size_t>(node)].shape;
  out.set_bytes(static_cast<uint64_t>(s.bytes()));
  out.set_shape(s.ToString());
  out.set_bytes_per_extent(BytesPerExtent(result, node));
}

void FillOuterExtent(const CompileResult& result, v1::OuterExtent& out) {
  out.set_lo(result.served.lo);
  out.set_hi(result.served.hi);
  for (int64_t p : result.graph.outer_parameters) out.add_parameters(p);
}

void FillEstimate(std::string_view planner, const PlanCost& cost, v1::PlanEstimate& out) {
  out.set_planner(std::string(planner));
  out.set_seconds(cost.seconds);
  out.set_global_bytes(static_cast<uint64_t>(cost.global_bytes));
  out.set_kernels(static_cast<uint32_t>(cost.kernels));
}

void FillCost(const CompileResult& result, v1::CostEstimate& out) {
  out.set_shipped(std::string(PlannerKindName(result.shipped)));
  out.set_model_version(std::string(CostModelVersionName(kCurrentCostModel)));
  FillEstimate("stitch", result.stitched_cost, *out.add_plans());
  for (const BaselineEstimate& b : result.baselines) {
    FillEstimate(BaselineCompilerName(b.compiler), b.cost, *out.add_plans());
  }
  if (result.eager_cost) FillEstimate("eager", *result.eager_cost, *out.add_plans());
  out.set_stitched_seconds(result.cost.seconds);
  out.set_baseline_seconds(result.baseline_cost.seconds);
  out.set_stitched_global_bytes(static_cast<uint64_t>(result.cost.global_bytes));
  out.set_baseline_global_bytes(static_cast<uint64_t>(result.baseline_cost.global_bytes));
  out.set_stitched_kernels(static_cast<uint32_t>(result.cost.kernels));
  out.set_baseline_kernels(static_cast<uint32_t>(result.baseline_cost.kernels));
}

}  // namespace

v1::KernelBundle ToBundle(const CompileResult& result, const CompileOptions& options) {
  const Graph& g = result.graph;
  v1::KernelBundle b;
  b.set_key(result.key.hex);
  b.set_target(options.codegen.target.arch());
  for (const CompiledKernel& k : result.kernels) FillKernel(g, result, k, *b.add_kernels());
  for (int node : result.temporaries) {
    v1::TempBuffer& t = *b.add_temporaries();
    t.set_bytes(static_cast<uint64_t>(g.nodes[static_cast<size_t>(node)].shape.bytes()));
    t.set_alignment(kTemporaryAlignment);
    t.set_bytes_per_extent(BytesPerExtent(result, node));
  }
  for (int node : g.Parameters()) FillBufferSpec(result, node, *b.add_inputs());
  for (int node : g.outputs) {
    v1::BufferSpec& spec = *b.add_outputs();
    FillBufferSpec(result, node, spec);
    if (const int64_t input = AliasedParameter(g, node); input >= 0) {
      spec.set_aliases_input(static_cast<int32_t>(input));
    }
  }
  if (result.served.hi > 0) FillOuterExtent(result, *b.mutable_outer_extent());
  b.set_plan(Describe(g, result.plan));
  FillCost(result, *b.mutable_cost());
  b.set_compile_seconds(result.timings.total_ms() / 1000.0);
  b.set_compiler_version(CompilerVersion());
  return b;
}

}  // namespace stitch
