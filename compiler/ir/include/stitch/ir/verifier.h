// The verifier: the gate every graph from outside passes before anything else runs.
//
// Thread-safety: pure function.
#pragma once

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"

namespace stitch {

// Checks that `g` is well formed: operand indices in range, no cycles, known dtypes and
// op codes, arities, attributes consistent with the op (broadcast maps, permutations,
// slice bounds, reduce dimensions, ...), declared shapes equal to the inferred ones, element
// counts that fit in 64 bits, and `limits`. Returns OK, or INVALID_ARGUMENT (RESOURCE_EXHAUSTED
// for limits) with a message that names the node ("node 7 'add.3'") and the rule broken.
// Never crashes, whatever the input.
Status Verify(const Graph& g, const GraphLimits& limits = {});

// Returns the shape `n` must have given its operands' declared shapes, or the rule it breaks.
// Used by importers to fill in shapes they were not given.
StatusOr<Shape> InferShape(const Graph& g, int node);

}  // namespace stitch
