// Imports HLO text, as XLA dumps and tests write it, into stitch graphs.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stitch/compiler/graph.h"
#include "stitch/compiler/status.h"

namespace stitch {

struct HloImportOptions {
  GraphLimits limits;
  std::string source_name = "<hlo>";  // used in messages: "<source_name>:<line>"
};

// Imports every module in `text` (modules are separated by lines "// -----"); each
// module's entry computation becomes one graph (fusions inlined, tuples flattened into
// several outputs, layouts normalised into transposes, batch-norm ops expanded).
// Returns UNIMPLEMENTED naming the first out-of-scope op and its line ("dot at foo.hlo:12"),
// or INVALID_ARGUMENT for text that is not valid HLO. Every graph returned passes Verify.
StatusOr<std::vector<Graph>> ImportHloModules(std::string_view text,
                                              const HloImportOptions& options = {});

// Imports a text that must hold exactly one module.
StatusOr<Graph> ImportHloModule(std::string_view text, const HloImportOptions& options = {});

// Partitions the entry computation of each module in `text` into maximal connected
// memory-intensive subgraphs: ops outside stitch's scope (dot, convolution, custom-call,
// collectives, while, ...) become boundaries whose results are parameters of the
// subgraphs that use them. Subgraphs with no compute (only parameters, constants and
// pure data movement of one value) are dropped. Each returned graph passes Verify.
StatusOr<std::vector<Graph>> ExtractMemoryIntensiveSubgraphs(
    std::string_view text, const HloImportOptions& options = {});

}  // namespace stitch
