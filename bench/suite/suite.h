// The benchmark suite: the 30 memory-intensive subgraphs of
// corpus/benchmarks/proposed_suite_30.csv, built with stitch's IR at the shapes the CSV lists
// (where it lists a range, one representative point, named in shape_text).
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

#include "stitch/compiler/graph.h"
#include "stitch/compiler/status.h"

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

// The shape-scaling rule used to run the suite's graphs on the host emulator in CI time
// (the same rule the corpus tests use): a graph whose largest tensor has at most `budget`
// elements runs as is. Otherwise the smallest power of two F (up to 2^12) such that dividing
// every dimension size v with v % F == 0 and v >= 8F by F (and slice bounds and pad amounts
// that are multiples of F by F) gives a graph that verifies, fits the budget and keeps its
// non-splat constants' shapes. Failing that, the graph runs at real shapes if it fits 16x
// the budget. One addition to the corpus rule, for graphs it would reject: the smallest
// shape some F reaches runs if it fits 16x the budget. Otherwise there is no emulation
// shape (nullopt).
std::optional<Graph> ScaleForEmulation(const Graph& g, int64_t budget = int64_t{1} << 18);

// The same rule, also saying which factor it used (1 when the graph runs at real shapes).
struct ScaledGraph {
  Graph graph;
  int64_t factor = 1;
};
std::optional<ScaledGraph> ScaleForEmulationWithFactor(const Graph& g,
                                                       int64_t budget = int64_t{1} << 18);

// Largest element count of any node.
int64_t LargestTensor(const Graph& g);

}  // namespace stitch::suite
