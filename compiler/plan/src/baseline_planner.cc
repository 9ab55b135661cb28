#include "stitch/plan/baseline_planner.h"

#include <algorithm>
#include <map>
#include <set>

#include "stitch/ir/aliasing.h"
#include "stitch/plan/op_classes.h"

namespace stitch {
namespace {

// A node is materialised (lives in global memory between kernels) when it is a parameter, a
// reduce, or in `cut`; everything else is recomputed where it is needed.
bool IsMaterialised(const Graph& g, int id, const std::set<int>& cut) {
  const OpCode op = g.nodes[id].op;
  return op == OpCode::kParameter || op == OpCode::kReduce || cut.count(id) > 0;
}

// The transposes of a minor-most dimension that a reduce would take into its kernel. XLA
// does not fuse them into a reduction (its priority fusion's DoNotFuseTransposeIntoReduce
// case, in the corpus): they get a kernel of their own, which its transpose emitter tiles
// through shared memory, and the reduction reads the result in order.
std::set<int> TransposesIntoReduces(const Graph& g, const std::vector<bool>& live) {
  std::set<int> found;
  const std::set<int> none;
  for (size_t r = 0; r < g.nodes.size(); ++r) {
    if (!live[r] || g.nodes[r].op != OpCode::kReduce) continue;
    std::set<int> seen;
    std::vector<int> stack(g.nodes[r].operands.begin(), g.nodes[r].operands.end());
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      if (IsMaterialised(g, i, none) || !seen.insert(i).second) continue;
      if (MovesMinorDimension(g, i)) {
        found.insert(i);
        continue;
      }
      for (int o : g.nodes[i].operands) stack.push_back(o);
    }
  }
  return found;
}

// Collects, for the given roots, the nodes a kernel must evaluate and the materialised
// nodes it must read. The roots themselves are evaluated even when materialised.
void CollectKernelBody(const Graph& g, const std::vector<int>& roots, const std::vector<int>& rank,
                       const std::set<int>& cut, KernelSpec& spec) {
  std::set<int> body, inputs;
  std::vector<int> stack;
  for (int r : roots) {
    body.insert(r);
    for (int o : g.nodes[r].operands) stack.push_back(o);
  }
  while (!stack.empty()) {
    int i = stack.back();
    stack.pop_back();
    if (IsMaterialised(g, i, cut)) {
      inputs.insert(i);
      continue;
    }
    if (!body.insert(i).second) continue;
    for (int o : g.nodes[i].operands) stack.push_back(o);
  }
  spec.nodes.assign(body.begin(), body.end());
  std::sort(spec.nodes.begin(), spec.nodes.end(), [&](int a, int b) { return rank[a] < rank[b]; });
  spec.inputs.assign(inputs.begin(), inputs.end());
  std::sort(spec.inputs.begin(), spec.inputs.end(),
            [&](int a, int b) { return rank[a] < rank[b]; });
}

}  // namespace

bool IsRowReduction(const Graph& g, int node) {
  const Node& n = g.nodes[node];
  const Shape& in = g.nodes[n.operands[0]].shape;
  if (n.dimensions.empty() || in.rank() == 0) return true;
  return n.dimensions.back() == in.rank() - 1;
}

StatusOr<FusionPlan> PlanBaseline(const Graph& g) {
  FusionPlan plan;
  plan.planner = "baseline";
  std::vector<int> topo = TopologicalOrder(g);
  std::vector<int> rank(g.nodes.size());
  for (size_t k = 0; k < topo.size(); ++k) rank[topo[k]] = static_cast<int>(k);
  std::vector<bool> live = LiveNodes(g);

  // Reduce kernels and the transposes they read, in topological order so each runs after
  // the kernels it reads.
  const std::set<int> transposes = TransposesIntoReduces(g, live);
  for (int i : topo) {
    if (!live[i]) continue;
    KernelSpec spec;
    if (transposes.count(i)) {
      spec.kind = KernelKind::kLoop;
    } else if (g.nodes[i].op == OpCode::kReduce) {
      spec.kind = IsRowReduction(g, i) ? KernelKind::kRowReduce : KernelKind::kColumnReduce;
      spec.hero = i;
    } else {
      continue;
    }
    spec.outputs = {i};
    CollectKernelBody(g, {i}, rank, transposes, spec);
    plan.kernels.push_back(std::move(spec));
  }

  // Loop kernels for the remaining outputs, one per element count, in output order.
  std::map<int64_t, std::vector<int>> by_count;
  std::vector<int64_t> count_order;
  std::set<int> seen;
  for (int o : g.outputs) {
    // Outputs that are a parameter's bytes (the parameter, or reshapes of it) alias its
    // buffer: no kernel copies them (aliasing.h).
    if (g.nodes[o].op == OpCode::kReduce || IsParameterView(g, o) || transposes.count(o) ||
        !seen.insert(o).second) {
      continue;
    }
    int64_t count = g.nodes[o].shape.elements();
    if (!by_count.count(count)) count_order.push_back(count);
    by_count[count].push_back(o);
  }
  for (int64_t count : count_order) {
    KernelSpec spec;
    spec.kind = KernelKind::kLoop;
    spec.outputs = by_count[count];
    CollectKernelBody(g, spec.outputs, rank, transposes, spec);
    plan.kernels.push_back(std::move(spec));
  }

  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    KernelSpec& spec = plan.kernels[k];
    spec.name = "stitch_k" + std::to_string(k) + "_" + std::string(KernelKindName(spec.kind));
  }
  return plan;
}

std::vector<int> TemporaryNodes(const Graph& g, const FusionPlan& plan) {
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::vector<int> temps;
  std::set<int> seen;
  for (const KernelSpec& k : plan.kernels) {
    for (int o : k.outputs) {
      if (!outputs.count(o) && g.nodes[o].op != OpCode::kParameter && seen.insert(o).second) {
        temps.push_back(o);
      }
    }
  }
  return temps;
}

TrafficEstimate EstimateTraffic(const Graph& g, const FusionPlan& plan) {
  TrafficEstimate t;
  for (const KernelSpec& k : plan.kernels) {
    for (int i : k.inputs) t.bytes_read += g.nodes[i].shape.bytes();
    for (int o : k.outputs) t.bytes_written += g.nodes[o].shape.bytes();
  }
  return t;
}

TrafficEstimate TrafficLowerBound(const Graph& g) {
  TrafficEstimate t;
  // Outputs that are views of a parameter move no byte, and need it read only when
  // another output does.
  std::set<int> outputs;
  for (int o : g.outputs) {
    if (!IsParameterView(g, o)) outputs.insert(o);
  }
  std::vector<bool> live = ReachedFrom(g, std::vector<int>(outputs.begin(), outputs.end()));
  for (int p : g.Parameters()) {
    if (live[p]) t.bytes_read += g.nodes[p].shape.bytes();
  }
  for (int o : outputs) t.bytes_written += g.nodes[o].shape.bytes();
  return t;
}

namespace {

// Whether each value of the reduce `id` depends on elements spread over its whole input: it
// reduces the outermost input dimension longer than one, so no value is complete before the
// last of the input has been read.
bool IsWholeTensorStatistic(const Graph& g, int id) {
  const Node& n = g.nodes[id];
  if (n.op != OpCode::kReduce) return false;
  const std::vector<int64_t>& dims = g.nodes[n.operands[0]].shape.dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    return std::count(n.dimensions.begin(), n.dimensions.end(), static_cast<int64_t>(d)) > 0;
  }
  return false;
}

}  // namespace

int64_t ForcedRereadBytes(const Graph& g, int64_t on_chip_bytes) {
  const std::vector<int> order = TopologicalOrder(g);
  // Per node: the parameters it depends on, those it reads element by element (through no
  // reduce), and the whole-tensor statistics it depends on.
  std::vector<std::set<int>> parameters(g.nodes.size()), elementwise(g.nodes.size()),
      statistics(g.nodes.size());
  for (int id : order) {
    const Node& node = g.nodes[id];
    if (node.op == OpCode::kParameter) {
      parameters[id] = elementwise[id] = {id};
      continue;
    }
    for (int o : node.operands) {
      parameters[id].insert(parameters[o].begin(), parameters[o].end());
      statistics[id].insert(statistics[o].begin(), statistics[o].end());
      if (node.op != OpCode::kReduce)
        elementwise[id].insert(elementwise[o].begin(), elementwise[o].end());
    }
    if (IsWholeTensorStatistic(g, id)) statistics[id].insert(id);
  }
  const std::vector<bool> live = LiveNodes(g);
  std::set<int> reread;
  for (int id : order) {
    if (!live[id]) continue;
    for (int p : elementwise[id]) {
      if (g.nodes[p].shape.elements() > g.nodes[id].shape.elements()) continue;
      for (int r : statistics[id]) {
        if (parameters[r].count(p)) reread.insert(p);
      }
    }
  }
  int64_t bytes = 0;
  for (int p : reread) bytes += g.nodes[p].shape.bytes();
  return std::max<int64_t>(0, bytes - on_chip_bytes);
}

}  // namespace stitch
