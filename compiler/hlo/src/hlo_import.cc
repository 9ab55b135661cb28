// Public entry points of the HLO text importer.
#include "stitch/hlo/hlo_import.h"

#include <algorithm>

#include "hlo_ast.h"
#include "hlo_lower.h"

namespace stitch {

Status hlo::CheckTextSize(std::string_view text, const HloImportOptions& options) {
  const size_t limit = std::min(options.max_text_bytes, kMaxHloTextBytes);
  if (text.size() <= limit) return Status::Ok();
  return ResourceExhausted(options.source_name + ": HLO text of " + std::to_string(text.size()) +
                           " bytes is over the limit of " + std::to_string(limit) +
                           " (max_hlo_text_bytes)");
}

StatusOr<std::vector<Graph>> ImportHloModules(std::string_view text,
                                              const HloImportOptions& options) {
  STITCH_RETURN_IF_ERROR(hlo::CheckTextSize(text, options));
  STITCH_ASSIGN_OR_RETURN(std::vector<hlo::HloModule> modules,
                          hlo::ParseHloModules(text, options.source_name));
  std::vector<Graph> graphs;
  for (const auto& m : modules) {
    const hlo::HloComputation& entry = m.computations[m.entry];
    std::string name = m.name == "module" ? entry.name : m.name;
    STITCH_ASSIGN_OR_RETURN(Graph g, hlo::LowerComputation(m, entry, name, options));
    graphs.push_back(std::move(g));
  }
  return graphs;
}

StatusOr<Graph> ImportHloModule(std::string_view text, const HloImportOptions& options) {
  STITCH_ASSIGN_OR_RETURN(std::vector<Graph> graphs, ImportHloModules(text, options));
  if (graphs.size() != 1) {
    return InvalidArgument(options.source_name + ": expected exactly one HLO module, found " +
                           std::to_string(graphs.size()));
  }
  return std::move(graphs[0]);
}

}  // namespace stitch
