// Op and edge classes: what the stitching planner needs to know about each node and each
// producer -> consumer edge before it decides what shares a kernel.
//
// Thread-safety: pure functions over a verified graph.
#pragma once

#include <string_view>

#include "stitch/ir/graph.h"

namespace stitch {

enum class OpKind {
  kLeaf,              // parameter, constant, iota
  kLightElementwise,  // cheap to recompute in every consumer
  kHeavyElementwise,  // exp, log, tanh, erf, pow, div and kin: computed once, then reused
  kBroadcast,
  kRowReduce,     // reduces the minor-most input dimensions
  kColumnReduce,  // keeps the minor-most input dimension
  kMixedReduce,   // reduces inner dimensions but keeps the minor-most one, or all of them
  kLayout,        // transpose, reshape, slice, concatenate, pad, reverse
  kRng,
};

std::string_view OpKindName(OpKind k);  // "light_elementwise", ...

// Returns the class of node `id`.
OpKind ClassifyNode(const Graph& g, int id);

// How the threads computing a consumer need the producer's values.
enum class EdgeKind {
  kOneToOne,   // each consumer element needs the producer element at the same position
  kOneToMany,  // a producer element feeds many consumer elements (a broadcast, often of a
               // reduce result)
  kManyToOne,  // many producer elements feed one consumer element (a reduce)
  kReindex,    // a layout op: one-to-one, but at another position
};

std::string_view EdgeKindName(EdgeKind k);

// Returns the class of the edge from operand `operand` of node `consumer`.
EdgeKind ClassifyEdge(const Graph& g, int consumer, int operand);

// Returns true for ops whose recomputation in several consumers costs real time (the op
// list's Cost column).
bool IsHeavy(OpCode op);

// Whether node `id` is a transpose that moves its operand's minor-most dimension: the output
// dimensions after the one it becomes are not all of size 1, so elements adjacent in the
// output are apart in the operand.
bool MovesMinorDimension(const Graph& g, int id);

// For reduce node `id` of a verified graph, ignoring input dimensions of size 1: whether
// every reduced dimension comes before every kept one (the input's linear index is then
// reduced * kept + k), and whether every reduced dimension comes after every kept one
// (kept * reduced + r).
bool ReducesLeadingDims(const Graph& g, int id);
bool ReducesTrailingDims(const Graph& g, int id);

}  // namespace stitch
