// Turns a CompileRequest's subgraph into a verified graph: the validation every Compile and
// Lookup runs before it computes a key. Kept apart from the resolver, which also needs the
// cache and the compiler, so that the decoding can be exercised (and fuzzed) on its own.
//
// Thread-safety: pure functions.
#pragma once

#include "stitch/base/status.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph.h"
#include "stitch/v1/kernel_service.pb.h"

namespace stitch::daemon {

// Returns the request's graph (imported from hlo_text, with the request's outer_parameters,
// or converted from graph), verified against options.limits. Every failure is
// INVALID_ARGUMENT, whatever code the importer or verifier chose: the payload is the caller's
// input, and no retry fixes it. A graph request that also sets outer_parameters is refused.
StatusOr<Graph> GraphOfRequest(const v1::CompileRequest& request, const HloImportOptions& options);

}  // namespace stitch::daemon
