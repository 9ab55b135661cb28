// Imports HLO text, as XLA dumps and tests write it, into stitch graphs.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"

namespace stitch {

// The most HLO text the importer reads: no real HLO dump comes near it, and it bounds the
// parser's memory. HloImportOptions::max_text_bytes may lower it, never raise it.
inline constexpr size_t kMaxHloTextBytes = size_t{256} << 20;

struct HloImportOptions {
  GraphLimits limits;
  // Texts longer than min(this, kMaxHloTextBytes) are refused before parsing, with
  // RESOURCE_EXHAUSTED naming max_hlo_text_bytes (stitchd's key for it).
  size_t max_text_bytes = kMaxHloTextBytes;
  std::string source_name = "<hlo>";  // used in messages: "<source_name>:<line>"
  // ExtractMemoryIntensiveSubgraphs splits a connected memory-intensive region of more HLO
  // instructions than this into pieces of at most this many, consecutive in text order. In a
  // Transformer the residual stream and the optimizer's global norm join every layer's
  // elementwise work into one region of ~10^4 instructions, whose plan search and codegen
  // take minutes; pieces of this size compile in seconds and lose only the fusion across
  // their cuts. 0: no limit.
  size_t max_subgraph_instructions = 1024;
};

// Imports every module in `text` (modules are separated by lines "// -----"); each
// module's entry computation (the one marked ENTRY, else the last) becomes one graph, named
// after the module: fusions inlined, tuples flattened into several outputs, layouts
// normalised into transposes, batch-norm ops expanded, nodes that reach no output dropped.
// Node::name is the HLO instruction name (expansion nodes add a suffix) and Node::source is
// "<source_name>:<line>". Every entry parameter stays a parameter, numbered as in HLO (tuple
// parameters are flattened, their elements numbered in order).
// Returns UNIMPLEMENTED naming the first out-of-scope op and its line
// ("unsupported op 'dot' (instruction 'dot.3') at foo.hlo:12"), or for element types, dynamic
// shapes and reducers stitch lacks; INVALID_ARGUMENT with "<source_name>:<line>" for text that
// is not valid HLO; RESOURCE_EXHAUSTED past `options.limits` or options.max_text_bytes.
// Every graph returned passes Verify.
StatusOr<std::vector<Graph>> ImportHloModules(std::string_view text,
                                              const HloImportOptions& options = {});

// Imports a text that must hold exactly one module.
StatusOr<Graph> ImportHloModule(std::string_view text, const HloImportOptions& options = {});

// Partitions the entry computation of each module in `text` into maximal connected
// memory-intensive subgraphs: ops outside stitch's scope (dot, convolution, custom-call,
// collectives, while, ...) become boundaries whose results are parameters of the
// subgraphs that use them. Subgraphs with no compute (only parameters, constants and
// pure data movement of one value) are dropped. Tuples and get-tuple-elements are resolved
// (elements of tuple parameters and of out-of-scope ops' tuple results become parameters of
// their own); constants are copied into each subgraph that uses them. Graphs are named
// "<module>.sg<k>" in the order of their first instruction in the text, parameters numbered
// in order of first use. A region over options.max_subgraph_instructions is cut into pieces
// of consecutive instructions; a value crossing a cut is an output of one piece and a
// parameter of the other. Returns INVALID_ARGUMENT for malformed text, RESOURCE_EXHAUSTED when
// a subgraph exceeds `options.limits` or the text options.max_text_bytes. Each returned graph
// passes Verify.
StatusOr<std::vector<Graph>> ExtractMemoryIntensiveSubgraphs(std::string_view text,
                                                             const HloImportOptions& options = {});

}  // namespace stitch
