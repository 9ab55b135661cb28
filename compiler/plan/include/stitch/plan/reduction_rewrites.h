// The graph rewrites XLA:GPU and TorchInductor apply to reductions before they fuse anything,
// so that the baseline models (baseline_models.h) plan the kernels those compilers really
// run. BASELINE_SOURCES.md gives each rule with the compiler source it comes from.
//
// XLA (sections 2.3 and 2.4: reduction_splitter.cc, tree_reduction_rewriter.cc):
//   * A reduction whose reduced dimensions are not contiguous (NCHW batch-norm statistics
//     over {0, 2, 3}) is split: the largest contiguous run of reduced dimensions is reduced
//     first, the rest by a second reduce.
//   * XLA emits a reduction in one kernel only when one block can own each output: a row
//     reduction over at most 16,384 elements, a column reduction over at most 4,096 rows. A
//     longer one is split in the graph: the reduced extent n is padded with the reduce's
//     init value to k1 x k2 (k2 near sqrt(n), chosen for the least padding, a power of two
//     on ties), reduced over k2 and then over k1, so it runs as two kernels and never uses
//     atomics.
//
// Inductor (sections 3.3 and 3.4: ir.py Reduction.num_splits, choices.py
// reduction_split_factor): a reduction with too few outputs to fill the GPU (fewer than
// 2 x SMs for an inner reduction over more than 8,192 elements, fewer than 64 x SMs for an
// outer one over more than 32) is split into `split` contiguous chunks of its reduced
// elements, each reduced by its own blocks into a partial, and a second kernel reduces the
// partials. Reduced dimensions that are not contiguous are brought together by a transpose
// first (Inductor indexes them in one loop).
//
// Every rewrite computes the same values up to the order in which floating-point terms are
// added, and keeps the graph's parameters and outputs.
//
// Thread-safety: pure functions.
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

// Returns a copy of the verified graph `g` after XLA's reduction splitter and tree
// rewriter, as described above; everything else is copied as it is.
Graph XlaReductionRewrites(const Graph& g);

// Returns the number of chunks Inductor splits a reduction into (1: no split), for `numel`
// outputs each reducing `rnumel` elements on a GPU of `sms` SMs; `inner` when the reduced
// elements are contiguous in memory (Inductor's INNER hint), false for OUTER.
int64_t InductorSplitFactor(int64_t numel, int64_t rnumel, bool inner, int sms);

// Returns a copy of the verified graph `g` with every reduction Inductor splits on a GPU of
// `sms` SMs replaced by the two reduces it runs.
Graph InductorSplitReductions(const Graph& g, int sms);

}  // namespace stitch
