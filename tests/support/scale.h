// The shape-scaling rule for running corpus graphs on the emulator within CI time.
//
// Rule: a graph whose largest tensor has at most `budget` elements runs at its real shapes.
// Otherwise pick the smallest power of two F (up to 2^12) such that dividing every dimension
// size v with v % F == 0 and v >= 8F by F (and every slice bound and pad amount that is a
// multiple of F by F) gives a graph that still verifies, whose largest tensor fits the
// budget, and whose non-splat constants keep their shapes. Dividing every qualifying size by
// one factor keeps reshapes consistent in the common cases (a merged dimension [6,512] ->
// [3072] stays [6,512/F] -> [3072/F]) and keeps irregular sizes irregular (50304 -> 393*128/F).
// When no F works the graph runs at its real shapes if it fits 16x the budget, and is
// reported as unscalable otherwise.
#pragma once

#include <algorithm>
#include <optional>

#include "stitch/compiler/graph.h"
#include "stitch/compiler/verifier.h"

namespace stitch::testing {

inline int64_t LargestTensor(const Graph& g) {
  int64_t m = 0;
  for (const Node& n : g.nodes) m = std::max(m, n.shape.elements());
  return m;
}

inline std::optional<Graph> ScaleBy(const Graph& g, int64_t f) {
  auto scale = [f](int64_t v) { return (v % f == 0 && v >= 8 * f) ? v / f : v; };
  auto scale_bound = [f](int64_t v) { return v % f == 0 ? v / f : v; };
  Graph s = g;
  for (Node& n : s.nodes) {
    int64_t before = n.shape.elements();
    for (int64_t& d : n.shape.dims) d = scale(d);
    if (n.op == OpCode::kConstant && n.literal.size() > 1 && n.shape.elements() != before) {
      return std::nullopt;
    }
    for (int64_t& v : n.slice_starts) v = scale_bound(v);
    for (int64_t& v : n.slice_limits) v = scale_bound(v);
    for (int64_t& v : n.pad_low) v = scale_bound(v);
    for (int64_t& v : n.pad_high) v = scale_bound(v);
  }
  if (!Verify(s).ok()) return std::nullopt;
  return s;
}

// Returns the graph to run on the emulator under the rule above, or nullopt if none.
inline std::optional<Graph> ScaleForEmulation(const Graph& g, int64_t budget = int64_t{1} << 18) {
  if (LargestTensor(g) <= budget) return g;
  for (int64_t f = 2; f <= (int64_t{1} << 12); f *= 2) {
    std::optional<Graph> s = ScaleBy(g, f);
    if (s && LargestTensor(*s) <= budget) return s;
  }
  if (LargestTensor(g) <= 16 * budget) return g;
  return std::nullopt;
}

}  // namespace stitch::testing
