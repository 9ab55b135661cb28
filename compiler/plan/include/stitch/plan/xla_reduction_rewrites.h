// The graph rewrite XLA:GPU applies to long reductions before it fuses anything, so that the
// XLA baseline model plans the kernels XLA really runs (BASELINE_SOURCES.md, sections 2.3
// and 2.4: tree_reduction_rewriter.cc).
//
// XLA emits a reduction in one kernel only when one block can own each output: a row
// reduction over at most 16,384 elements, a column reduction over at most 4,096 rows. A
// longer one is split in the graph: the reduced extent n is padded with the reduce's init
// value to k1 x k2 (k2 near sqrt(n), chosen for the least padding, a power of two on ties),
// reduced over k2 and then over k1, so it runs as two kernels and never uses atomics.
//
// Only reductions whose reduced dimensions are contiguous (all trailing: a row reduction,
// or all leading: a column reduction) are rewritten here; others are left as they are.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <utility>

#include "stitch/ir/graph.h"

namespace stitch {

// The longest reduction XLA keeps in one kernel, by kind (reduction_utils.cc:
// MinThreadsXRowReduction x 16, and WarpSize x 128).
inline constexpr int64_t kXlaRowReductionBound = 16384;
inline constexpr int64_t kXlaColumnReductionBound = 4096;

// Returns {k1, k2} with k1 x k2 >= n and k2 <= cap: k2 is the divisor-like factor in
// (floor(sqrt(n)) / 2, floor(sqrt(n))] (capped) that leaves the least padding, a power of
// two among equals. Requires n >= 2 and cap >= 1.
std::pair<int64_t, int64_t> XlaTreeSplit(int64_t n, int64_t cap);

// Returns a copy of the verified graph `g` with every contiguous reduction longer than
// XLA's bound replaced by the two-step tree reduction described above (reshape, pad when
// needed, reduce, reduce, reshape back); everything else is copied as it is. The result
// computes the same values up to the order in which floating-point terms are added.
Graph XlaTreeReductionRewrite(const Graph& g);

}  // namespace stitch
