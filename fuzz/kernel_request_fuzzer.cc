// Fuzzes KernelService request decoding: the bytes of a Compile or Lookup call go through
// what the resolver runs before it looks in the cache or compiles (parse the
// CompileRequest, the target, the subgraph into a verified graph, the key). Compiling is
// left out: it needs the LLVM backends, and its input is only ever a verified graph.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "quiet_protobuf.h"
#include "request_graph.h"
#include "stitch/ir/key.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/target.h"
#include "stitch/v1/kernel_service.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stitch::v1::CompileRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  stitch::Target target;
  if (!request.target().empty()) {
    stitch::StatusOr<stitch::Target> parsed = stitch::Target::Parse(request.target());
    if (!parsed.ok()) return 0;
    target = *parsed;
  }
  stitch::HloImportOptions options;
  options.source_name = "request";
  stitch::StatusOr<stitch::Graph> graph = stitch::daemon::GraphOfRequest(request, options);
  if (!graph.ok()) {
    // The service maps INVALID_ARGUMENT to a client error; any other code would read as the
    // daemon's fault.
    if (graph.status().code() != stitch::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (!stitch::Verify(*graph, options.limits).ok()) std::abort();
  stitch::KeyContext context;
  context.target = target.name();
  (void)stitch::ComputeKey(*graph, context);
  return 0;
}
