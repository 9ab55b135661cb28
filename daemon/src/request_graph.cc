#include "request_graph.h"

#include "stitch/ir/graph_proto.h"
#include "stitch/ir/verifier.h"

namespace stitch::daemon {
namespace {

// Every failure to turn the payload into a valid graph is the caller's input, whatever
// code the importer chose (RESOURCE_EXHAUSTED for size limits, UNIMPLEMENTED for an op
// outside stitch's scope): the job cannot retry its way out of it.
Status AsInvalidArgument(const Status& s) {
  if (s.ok()) return s;
  return InvalidArgument(s.message());
}

}  // namespace

StatusOr<Graph> GraphOfRequest(const v1::CompileRequest& request, const HloImportOptions& options) {
  switch (request.subgraph_case()) {
    case v1::CompileRequest::kGraph: {
      // One source of truth for what varies: a second list could contradict the graph's.
      if (!request.outer_parameters().empty()) {
        return InvalidArgument(
            "outer_parameters is for hlo_text requests: a graph request names them in "
            "Graph.outer_parameters");
      }
      StatusOr<Graph> g = FromProto(request.graph());
      if (!g.ok()) return AsInvalidArgument(g.status());
      Status verified = Verify(*g, options.limits);
      if (!verified.ok()) return AsInvalidArgument(verified);
      return g;
    }
    case v1::CompileRequest::kHloText: {
      StatusOr<Graph> g = ImportHloModule(request.hlo_text(), options);
      if (!g.ok()) return AsInvalidArgument(g.status());
      if (request.outer_parameters().empty()) return g;
      // The importer verified the graph without them; the verifier checks each names a
      // parameter with a dimension 0, once.
      g->outer_parameters.assign(request.outer_parameters().begin(),
                                 request.outer_parameters().end());
      Status verified = Verify(*g, options.limits);
      if (!verified.ok()) return AsInvalidArgument(verified);
      return g;
    }
    case v1::CompileRequest::SUBGRAPH_NOT_SET:
      break;
  }
  return InvalidArgument("the request carries neither a graph nor hlo_text");
}

}  // namespace stitch::daemon
