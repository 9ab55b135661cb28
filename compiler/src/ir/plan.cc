#include "stitch/compiler/plan.h"

#include <sstream>

namespace stitch {

std::string_view KernelKindName(KernelKind k) {
  switch (k) {
    case KernelKind::kLoop:
      return "loop";
    case KernelKind::kRowReduce:
      return "row_reduce";
    case KernelKind::kColumnReduce:
      return "column_reduce";
  }
  return "invalid";
}

std::string Describe(const Graph& g, const FusionPlan& plan) {
  std::ostringstream out;
  out << plan.planner << " plan: " << plan.kernels.size() << " kernel(s)\n";
  for (const KernelSpec& k : plan.kernels) {
    out << "  " << k.name << " [" << KernelKindName(k.kind) << "]";
    if (k.hero >= 0) out << " hero=%" << k.hero << " (" << g.nodes[k.hero].shape.ToString() << ")";
    out << " nodes=" << k.nodes.size() << " reads={";
    for (size_t i = 0; i < k.inputs.size(); ++i) out << (i ? ",%" : "%") << k.inputs[i];
    out << "} writes={";
    for (size_t i = 0; i < k.outputs.size(); ++i) out << (i ? ",%" : "%") << k.outputs[i];
    out << "}\n";
  }
  return out.str();
}

}  // namespace stitch
