// Outputs that are views of a parameter. A graph may return a parameter, or a reshape of
// one (BladeDISC's stitched softmax returns its reshaped scores beside the probabilities).
// Such an output holds the parameter's bytes as they are, so no kernel writes it: the plans
// leave it out, the bundle names the input it aliases (kernel_bundle.proto,
// BufferSpec.aliases_input), and the caller binds that input's buffer for it, or the loader
// copies the input where the caller binds another.
#pragma once

#include <cstdint>

#include "stitch/ir/graph.h"

namespace stitch {

// Returns the index of the parameter node whose bytes node `node` is, or -1 when it is none's.
// A parameter is its own bytes, and so is a chain of reshapes of one, since a reshape of a
// dense row-major array moves no byte. Requires a valid node index and operand indices.
int ViewedParameterNode(const Graph& g, int node);

// Returns the parameter_number of ViewedParameterNode(g, node), or -1.
int64_t AliasedParameter(const Graph& g, int node);

// Returns true when `node` is a parameter's bytes (ViewedParameterNode).
inline bool IsParameterView(const Graph& g, int node) { return ViewedParameterNode(g, node) >= 0; }

// Returns the node whose buffer holds graph output `output` once the kernels have run: the
// parameter it views (ViewedParameterNode), or the output itself, which a kernel writes.
inline int OutputBufferNode(const Graph& g, int output) {
  const int viewed = ViewedParameterNode(g, output);
  return viewed >= 0 ? viewed : output;
}

}  // namespace stitch
