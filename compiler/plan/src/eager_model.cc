#include "stitch/plan/eager_model.h"

#include <algorithm>
#include <set>

#include "stitch/plan/baseline_planner.h"
#include "stitch/plan/schedule.h"

namespace stitch {
namespace {

// Views change strides only; the consuming kernel indexes the viewed buffer.
bool IsView(const Node& n) {
  switch (n.op) {
    case OpCode::kBroadcast:
    case OpCode::kReshape:
    case OpCode::kTranspose:
    case OpCode::kSlice:
      return true;
    case OpCode::kConstant:
      return n.shape.rank() == 0;  // a scalar argument
    default:
      return false;
  }
}

// Buffers that exist before any kernel runs: parameters and tensor constants.
bool IsResident(const Node& n) {
  return n.op == OpCode::kParameter || (n.op == OpCode::kConstant && n.shape.rank() > 0);
}

// The kernel of `id`: the node, the views it reads through, and the buffers behind them.
KernelSpec KernelOf(const Graph& g, int id, const std::vector<int>& rank) {
  KernelSpec spec;
  const Node& n = g.nodes[static_cast<size_t>(id)];
  if (n.op == OpCode::kReduce) {
    spec.kind = IsRowReduction(g, id) ? KernelKind::kRowReduce : KernelKind::kColumnReduce;
    spec.hero = id;
  }
  spec.outputs = {id};
  std::set<int> body = {id}, inputs;
  std::vector<int> stack(n.operands.begin(), n.operands.end());
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    const Node& operand = g.nodes[static_cast<size_t>(i)];
    if (!IsView(operand)) {
      inputs.insert(i);
      continue;
    }
    if (body.insert(i).second)
      stack.insert(stack.end(), operand.operands.begin(), operand.operands.end());
  }
  const auto by_rank = [&](int a, int b) {
    return rank[static_cast<size_t>(a)] < rank[static_cast<size_t>(b)];
  };
  spec.nodes.assign(body.begin(), body.end());
  std::sort(spec.nodes.begin(), spec.nodes.end(), by_rank);
  spec.inputs.assign(inputs.begin(), inputs.end());
  std::sort(spec.inputs.begin(), spec.inputs.end(), by_rank);
  return spec;
}

}  // namespace

StatusOr<FusionPlan> PlanEagerModel(const Graph& g, const GpuDevice& device) {
  FusionPlan plan;
  plan.planner = "eager";
  const std::vector<int> topo = TopologicalOrder(g);
  std::vector<int> rank(g.nodes.size());
  for (size_t k = 0; k < topo.size(); ++k) rank[static_cast<size_t>(topo[k])] = static_cast<int>(k);
  const std::vector<bool> live = LiveNodes(g);
  for (int id : topo) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (!live[static_cast<size_t>(id)] || IsView(n) || IsResident(n)) continue;
    plan.kernels.push_back(KernelOf(g, id, rank));
    KernelSpec& spec = plan.kernels.back();
    spec.name = "eager_k" + std::to_string(plan.kernels.size() - 1) + "_" +
                std::string(KernelKindName(spec.kind));
  }
  STITCH_RETURN_IF_ERROR(SchedulePlan(g, plan, device));
  return plan;
}

}  // namespace stitch
