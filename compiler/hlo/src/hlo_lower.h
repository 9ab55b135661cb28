// Lowering of parsed HLO (hlo_ast.h) to stitch graphs.
#pragma once

#include <string>
#include <string_view>

#include "hlo_ast.h"
#include "stitch/base/status.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph.h"

namespace stitch::hlo {

// Lowers computation `comp` of module `m` as the graph's top level: its parameters become
// graph parameters (tuple parameters flattened, non-default layouts read physically and
// transposed), fusions are inlined, and its root (flattened) gives the outputs, transposed to
// the root's declared layout. Dead nodes are dropped; the result has passed Verify.
// Returns UNIMPLEMENTED for the first out-of-scope op on the live path, INVALID_ARGUMENT for
// malformed instructions, RESOURCE_EXHAUSTED past `options.limits`.
StatusOr<Graph> LowerComputation(const HloModule& m, const HloComputation& comp,
                                 const std::string& graph_name, const HloImportOptions& options);

// Returns OK when instruction `ins` (of module `m`) can be lowered by itself: an op stitch
// supports, with supported element types and static shapes, a recognised reducer, and (for
// fusions) a body that is in scope. Otherwise returns why not; UNIMPLEMENTED names the op.
Status CheckInScope(const HloModule& m, const HloInstruction& ins, const std::string& source);

// Returns OK when `text` is within options.max_text_bytes (and kMaxHloTextBytes), else
// RESOURCE_EXHAUSTED "<source>: HLO text of N bytes is over the limit of M
// (max_hlo_text_bytes)". Both entry points check it before parsing anything.
Status CheckTextSize(std::string_view text, const HloImportOptions& options);

// True for ops that never compute (plumbing and pure layout changes of one value).
bool IsDataMovementOnly(std::string_view opcode);

}  // namespace stitch::hlo
