#include "gpu/bucket_case.h"

#include <algorithm>
#include <random>

#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"

namespace stitch::gpu {

StatusOr<OuterNamed> NameOuterParameters(const Graph& g) {
  const std::vector<int> params = g.Parameters();
  if (params.empty()) return InvalidArgument("the graph has no parameter");
  const Shape& first = g.nodes[static_cast<size_t>(params[0])].shape;
  if (first.rank() == 0) return InvalidArgument("its first parameter is a scalar");
  OuterNamed out;
  out.extent = first.dims[0];
  out.graph = g;
  out.graph.outer_parameters = ParametersWithOuterExtent(g, out.extent);
  return out;
}

int64_t SecondExtent(const Bucket& served, int64_t extent) {
  int64_t other = 3 * served.hi / 4;
  if (other == extent) other = served.hi;
  return std::clamp(other, served.lo, served.hi);
}

StatusOr<Graph> ExactAt(const Graph& named, int64_t extent) {
  STITCH_ASSIGN_OR_RETURN(ShapeClass shape_class, ClassifyShapes(named));
  Graph exact = AtExtent(named, shape_class, extent);
  exact.outer_parameters.clear();
  return exact;
}

Graph RunGraphAt(const CompileResult& compiled, int64_t extent) {
  return AtExtent(compiled.graph, compiled.shape_class, extent);
}

std::string NotGenericReason(const Graph& named, const CompileResult& compiled) {
  if (!compiled.not_generic.empty()) return compiled.not_generic;
  StatusOr<ShapeClass> c = ClassifyShapes(named);
  return c.ok() ? "the compile did not keep the shape class" : c.status().message();
}

StatusOr<BucketCheck> PrepareBucketCheck(const Graph& g,
                                         const std::vector<int64_t>& outer_parameters,
                                         const CompileOptions& options, uint64_t seed) {
  const std::vector<int> params = g.Parameters();
  for (int64_t p : outer_parameters) {
    if (p < 0 || p >= static_cast<int64_t>(params.size())) {
      return InvalidArgument("outer parameter " + std::to_string(p) + " of a graph with " +
                             std::to_string(params.size()) + " parameters");
    }
  }
  if (outer_parameters.empty()) return InvalidArgument("no outer parameters");
  const Shape& first = g.nodes[static_cast<size_t>(params[outer_parameters[0]])].shape;
  if (first.rank() == 0) return InvalidArgument("outer parameter is a scalar");
  OuterNamed named{g, first.dims[0]};
  named.graph.outer_parameters = outer_parameters;
  BucketCheck check;
  STITCH_ASSIGN_OR_RETURN(check.compiled, CompileGraph(named.graph, options));
  if (!check.compiled.shape_generic()) {
    return FailedPrecondition("not shape-generic: " +
                              NotGenericReason(named.graph, check.compiled));
  }
  check.extent = SecondExtent(check.compiled.served, named.extent);
  check.run_graph = RunGraphAt(check.compiled, check.extent);
  STITCH_ASSIGN_OR_RETURN(check.reference, ExactAt(named.graph, check.extent));
  std::mt19937_64 rng(seed);
  for (int p : check.reference.Parameters()) {
    check.inputs.push_back(RandomTensor(check.reference.nodes[static_cast<size_t>(p)].shape, rng));
  }
  STITCH_ASSIGN_OR_RETURN(check.expected, Evaluate(check.reference, check.inputs));
  return check;
}

CheckOutcome CompareWithReference(const BucketCheck& check, const std::vector<Tensor>& got) {
  CheckOutcome out;
  if (got.size() != check.expected.size()) {
    out.pass = false;
    out.message =
        std::to_string(got.size()) + " outputs, expected " + std::to_string(check.expected.size());
    return out;
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const Tensor& want = check.expected[k];
    const Comparison c = Compare(want, got[k], OutputTolerance(check.reference, want.shape.dtype));
    out.max_rel_error = std::max(out.max_rel_error, c.max_rel_error);
    if (!c.pass && out.pass) {
      out.pass = false;
      out.message = "output " + std::to_string(k) + " " + want.shape.ToString() + " at extent " +
                    std::to_string(check.extent) + ": " + c.message;
    }
  }
  return out;
}

}  // namespace stitch::gpu
