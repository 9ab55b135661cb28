// The reference interpreter: evaluates a verified graph directly, node by node, in double
// precision for floats and exact 64-bit arithmetic for integers. It is the oracle every
// kernel test compares against, so it favours clarity over speed.
//
// Precision rules: values of f16/bf16/f32 nodes are kept in double; `convert` (and
// bitcast-convert) round to the destination dtype, as the kernels do when they store.
//
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/reference/tensor.h"

namespace stitch {

// Evaluates `g` (which must have passed Verify) on `params`, ordered by parameter_number.
// Returns one tensor per graph output, or INVALID_ARGUMENT when the arguments do not match
// the parameters' shapes.
StatusOr<std::vector<Tensor>> Evaluate(const Graph& g, const std::vector<Tensor>& params);

}  // namespace stitch
