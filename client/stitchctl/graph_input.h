// Reading graphs from files: HLO text, binary stitch.v1.Graph, or its JSON form.
#pragma once

#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"

namespace stitch::ctl {

// Returns the graphs in `path` (an HLO file may hold several modules), each verified.
// The format is chosen by content: JSON starts with '{', HLO text has HLO keywords,
// anything else must parse as a binary stitch.v1.Graph.
StatusOr<std::vector<Graph>> LoadGraphs(const std::string& path);

// Returns the whole content of `path`, or NOT_FOUND / INVALID_ARGUMENT naming it.
StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` to `path`, or returns an error naming it.
Status WriteFile(const std::string& path, const std::string& data);

}  // namespace stitch::ctl
