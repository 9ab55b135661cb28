#include "stitch/plan/baseline_planner.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

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

// One bit set per node, of `bits` bits each, kept in one array.
class NodeBits {
 public:
  NodeBits(size_t nodes, size_t bits) : words_((bits + 63) / 64), data_(nodes * words_, 0) {}
  void Set(int node, size_t bit) { data_[Word(node, bit)] |= Mask(bit); }
  bool Test(int node, size_t bit) const { return (data_[Word(node, bit)] & Mask(bit)) != 0; }
  // Adds node `from`'s bits to node `to`'s.
  void OrInto(int to, int from) {
    for (size_t w = 0; w < words_; ++w) {
      data_[static_cast<size_t>(to) * words_ + w] |= data_[static_cast<size_t>(from) * words_ + w];
    }
  }

 private:
  size_t Word(int node, size_t bit) const { return static_cast<size_t>(node) * words_ + bit / 64; }
  static uint64_t Mask(size_t bit) { return uint64_t{1} << (bit % 64); }

  size_t words_;
  std::vector<uint64_t> data_;
};

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
  const std::vector<int> params = g.Parameters();
  std::vector<int> statistic_nodes;
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    if (IsWholeTensorStatistic(g, static_cast<int>(id))) {
      statistic_nodes.push_back(static_cast<int>(id));
    }
  }
  if (statistic_nodes.empty()) return 0;
  // Per node, as bit sets: the parameters it depends on, those it reads element by element
  // (through no reduce), and the whole-tensor statistics it depends on.
  const size_t n = g.nodes.size();
  NodeBits parameters(n, params.size()), elementwise(n, params.size()),
      statistics(n, statistic_nodes.size());
  std::vector<int> param_bit(n, -1), statistic_bit(n, -1);
  for (size_t i = 0; i < params.size(); ++i) param_bit[params[i]] = static_cast<int>(i);
  for (size_t i = 0; i < statistic_nodes.size(); ++i) {
    statistic_bit[statistic_nodes[i]] = static_cast<int>(i);
  }
  const std::vector<int> order = TopologicalOrder(g);
  for (int id : order) {
    const Node& node = g.nodes[id];
    if (param_bit[id] >= 0) {
      parameters.Set(id, param_bit[id]);
      elementwise.Set(id, param_bit[id]);
    }
    for (int o : node.operands) {
      parameters.OrInto(id, o);
      statistics.OrInto(id, o);
      if (node.op != OpCode::kReduce) elementwise.OrInto(id, o);
    }
    if (statistic_bit[id] >= 0) statistics.Set(id, statistic_bit[id]);
  }
  const std::vector<bool> live = LiveNodes(g);
  std::vector<bool> reread(params.size(), false);
  for (int id : order) {
    if (!live[id]) continue;
    for (size_t s = 0; s < statistic_nodes.size(); ++s) {
      if (!statistics.Test(id, s)) continue;
      for (size_t p = 0; p < params.size(); ++p) {
        reread[p] =
            reread[p] || (elementwise.Test(id, p) && parameters.Test(statistic_nodes[s], p) &&
                          g.nodes[params[p]].shape.elements() <= g.nodes[id].shape.elements());
      }
    }
  }
  int64_t bytes = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    if (reread[p]) bytes += g.nodes[params[p]].shape.bytes();
  }
  return std::max<int64_t>(0, bytes - on_chip_bytes);
}

}  // namespace stitch
