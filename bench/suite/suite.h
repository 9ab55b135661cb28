// The benchmark suite: the 30 memory-intensive subgraphs of
// testdata/corpus/benchmarks/proposed_suite_30.csv, built with stitch's IR at the shapes the CSV
// lists (where it lists a range, one representative point, named in shape_text).
//
// Conventions, as XLA lowers these models: f16/bf16 subgraphs take f16/bf16 parameters,
// convert to f32 for compute and convert back for their outputs; saved statistics (mean,
// rstd) and weight gradients stay f32 where frameworks keep them so.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"

namespace stitch::suite {

struct SuiteEntry {
  int id = 0;              // the CSV row, 1..30
  std::string model;       // e.g. "BERT-base"
  std::string pattern;     // e.g. "bias_add+layernorm"
  std::string shape_text;  // the shape built, e.g. "x[4096,768] f32"
  Graph graph;
};

// Number of entries; ids are 1..kSuiteSize.
inline constexpr int kSuiteSize = 30;

// Builds every entry, in id order. Building cannot fail; callers run stitch::Verify on the
// graphs (the suite's test checks that every one passes).
std::vector<SuiteEntry> BuildSuite();

// Builds one entry; NOT_FOUND for an id outside 1..kSuiteSize.
StatusOr<SuiteEntry> BuildSuiteEntry(int id);

// Returns the ids of a comma-separated list such as "2,13,29" (the benchmarks' --only);
// INVALID_ARGUMENT naming the item for anything but ids 1..kSuiteSize.
StatusOr<std::vector<int>> ParseSuiteIds(const std::string& text);

// Builds the entries whose ids are in `only` (every entry when it is empty), in id order.
std::vector<SuiteEntry> SelectSuite(const std::vector<int>& only);

}  // namespace stitch::suite
