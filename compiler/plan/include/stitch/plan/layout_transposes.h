// Folding layout transposes: computing in the layout the tensors are stored in.
//
// A tensor stored in another order than its logical one (XLA's channels-last layouts, which
// the HLO importer normalises into explicit transposes at the graph's edges; a channels-last
// PyTorch tensor handed over as its dense NHWC storage) reaches the planner as
//
//   t = transpose(x, p)        x as stored, t in logical order
//   ... elementwise ops, broadcasts of per-channel values, reductions over t ...
//   y = transpose(r, q)        back to the storage order of an output
//
// Every op between is indifferent to the order its elements are stored in, so the graph can
// compute in x's order instead: elementwise ops on permuted shapes, broadcasts and reductions
// with their dimensions mapped through p, and the two transposes cancelled (or composed into
// one). The planner then sees the access pattern memory really has: a batch norm over NHWC
// storage is a column reduction over [N*H*W, C], where the transposed form looks like a row
// reduction of a strided tensor and plans a transpose tile it does not need.
//
// A group of full-size values is folded only when it is closed: every value in it is an
// elementwise op whose operands are in the group, transposes by the same p, broadcasts,
// splat constants, elementwise ops of those (which join the group from above, through at
// most 64 ops), or other full-size values in logical order, which the group reads transposed
// into stored order (a ResNet block's batch norm backward reads its gradient row-major beside
// the NHWC input and mask); and every use of a value in it is such an op, a reduction (whose
// kept dimensions stay in order under p), a transpose, or a reshape of its storage. A group
// with any other use (a graph output in logical order, a slice, another reshape, a
// random-number op, whose values depend on the element's index) is left as it is, and so is
// one that would transpose as many values in logical order as it removes transposes (its
// roots, and the transposes after it that undo p). Broadcasts whose mapped dimensions fall
// out of order broadcast a transpose of their (smaller) operand.
//
// A reshape of a group value is one of its storage when every run of dimensions it merges or
// splits lies in the stored order side by side and in order: GroupNorm's view of NCHW into
// groups, [N,C,H,W] to [N,G,C/G,H*W], is over NHWC storage the transpose of the view
// [N,H*W,G,C/G] of the storage. The fold leaves it as that transpose of the reshaped
// storage, and folds again: a round per view, a few rounds at most. Of the rounds' graphs,
// the one whose transposes move the fewest elements is returned, so the rewrite never moves
// more elements through transposes than the graph did.
//
// Parameters, outputs (order, shapes, dtypes) and every computed value are unchanged; only a
// reduction's order of accumulation may differ, within floating-point rounding.
//
// Thread-safety: pure functions.
#pragma once

#include "stitch/ir/graph.h"

namespace stitch {

struct LayoutTransposeFold {
  Graph graph;     // the rewritten graph (a copy of the input when nothing folded)
  int folded = 0;  // the roots of the folded groups, over every round kept
};

// Returns the verified graph `g` with every closed group of values behind a layout transpose
// computed in its operands' stored order, round after round, as described above. The result
// passes Verify.
LayoutTransposeFold FoldLayoutTransposes(const Graph& g);

}  // namespace stitch
