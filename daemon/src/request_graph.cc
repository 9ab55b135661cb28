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
      StatusOr<Graph> g = FromProto(request.graph());
      if (!g.ok()) return AsInvalidArgument(g.status());
      Status verified = Verify(*g, options.limits);
      if (!verified.ok()) return AsInvalidArgument(verified);
      return g;
    }
    case v1::CompileRequest::kHloText: {
      StatusOr<Graph> g = ImportHloModule(request.hlo_text(), options);
      if (!g.ok()) return AsInvalidArgument(g.status());
      return g;
    }
    case v1::CompileRequest::SUBGRAPH_NOT_SET:
      break;
  }
  return InvalidArgument("the request carries neither a graph nor hlo_text");
}

}  // namespace stitch::daemon
