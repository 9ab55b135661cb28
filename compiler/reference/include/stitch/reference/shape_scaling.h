// Scaling a graph's shapes down so the host emulator can run it in test time while the
// graph keeps its structure (same ops, same reduction geometry, irregular sizes stay
// irregular).
//
// The rule: a graph whose largest tensor has at most `budget` elements runs at its real
// shapes. Otherwise shapes are halved step by step: one step divides every dimension size
// v that is even and at least T by two, and every slice bound and pad amount that is even
// by two, with T the smallest of 16, 32, ..., 4096 for which the result verifies. Dividing every
// qualifying size by the same factor keeps reshapes consistent in the common cases ([6,512] ->
// [3072] becomes [6,256] -> [1536]), and odd factors survive (50304 = 393 * 128 goes to 393 * 8).
// Steps stop at the first graph that fits the budget, or when a step no longer verifies, changes a
// non-splat constant, or changes nothing. If no step fits the budget, the smallest graph reached
// runs when it fits `slack` times the budget; otherwise there is no emulation shape.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "stitch/ir/graph.h"

namespace stitch {

struct ScaledGraph {
  Graph graph;
  int halvings = 0;  // 0: real shapes
};

// Returns the largest element count of any node of `g`.
int64_t LargestTensor(const Graph& g);

// Applies the rule above to a verified graph.
std::optional<ScaledGraph> ScaleForEmulation(const Graph& g, int64_t budget = int64_t{1} << 18,
                                             int64_t slack = 32);

}  // namespace stitch
