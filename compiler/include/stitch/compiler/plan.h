// Fusion plans: which nodes of a graph run in which kernel.
//
// A plan is produced by a planner (baseline_planner.h today) and consumed by codegen.
// Buffers: every graph parameter is an input buffer; every node in some kernel's
// `outputs` is materialised in global memory (a graph output or a temporary).
//
// Thread-safety: plain values.
#pragma once

#include <string>
#include <vector>

#include "stitch/compiler/graph.h"

namespace stitch {

// The shape of the loop nest a kernel runs; codegen has one emitter per kind.
enum class KernelKind {
  kLoop,          // one thread per output element, grid-stride; all outputs share a shape
  kRowReduce,     // the hero reduce's minor-most input dimension is reduced
  kColumnReduce,  // the hero reduce keeps the minor-most input dimension
};

std::string_view KernelKindName(KernelKind k);  // "loop", "row_reduce", "column_reduce"

struct KernelSpec {
  std::string name;  // a valid PTX identifier, unique within the plan
  KernelKind kind = KernelKind::kLoop;
  // For reduce kernels: the reduce node the loop nest is built around.
  int hero = -1;
  // Nodes evaluated inside this kernel, in topological order. Values flow between them in
  // registers; nodes read from global memory are in `inputs` instead.
  std::vector<int> nodes;
  // Materialised nodes this kernel reads: graph parameters, or outputs of earlier kernels.
  std::vector<int> inputs;
  // Nodes this kernel writes to global memory. For kLoop they all have the same number of
  // elements; for reduce kernels they are the hero (and possibly other reduces of the same
  // shape over the same dimensions).
  std::vector<int> outputs;
};

struct FusionPlan {
  std::string planner;              // "baseline"
  std::vector<KernelSpec> kernels;  // in an order that respects data dependences
};

// Returns a multi-line description: one line per kernel with its kind, hero and nodes.
std::string Describe(const Graph& g, const FusionPlan& plan);

}  // namespace stitch
