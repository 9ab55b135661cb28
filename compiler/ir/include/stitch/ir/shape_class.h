// Shape classes: one compiled bundle serves every run of a graph whose outer dimension's
// size falls in one bucket, so a job whose batch or sequence length varies compiles once per
// bucket instead of once per shape.
//
// A graph names the parameters whose dimension 0 varies (Graph::outer_parameters): the
// batch dimension, or batch and sequence flattened into one. That size is the graph's
// *outer extent*. In a shape-generic graph every tensor either has dimension 0 equal to
// factor x extent, for a whole factor the graph fixes, or does not depend on the extent at
// all; no op moves the extent out of dimension 0 or cuts it (but for a slice of its first
// rows, whose size is fixed). Kernels then index every
// tensor without dividing by the extent: it bounds their loops and nothing else, and is
// passed to them at launch (codegen.h). A reduction over dimension 0 is allowed: its
// reduced count is the extent, and its thread mapping is the bucket's.
//
// Buckets are powers of two: extent e is served by the bucket (top/2, top] with top the
// least power of two >= e. One bundle per bucket costs at most a factor 2 in the extent the
// thread mapping was chosen for; the kernels mask at the run's own extent, so no element is
// padded, copied or computed twice.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"

namespace stitch {

struct ShapeClass {
  int64_t extent = 0;  // the outer extent of the graph it was computed from
  // Per node: dimension 0 is factor[i] x extent, or 0 where the node's shape does not
  // depend on the extent.
  std::vector<int64_t> factor;
  // The least extent the graph is defined at: a slice of the first k rows of a varying
  // dimension 0 needs k of them. Buckets serve no extent below it.
  int64_t min_extent = 1;

  bool Varies(int node) const { return factor[node] > 0; }
};

// Which extents one bundle serves: lo <= extent <= hi.
struct Bucket {
  int64_t lo = 1;
  int64_t hi = 1;
};

// Returns the bucket of `extent` (>= 1): (top/2, top] for top the least power of two >= it.
Bucket BucketOf(int64_t extent);

// Returns the shape class of a verified graph with outer_parameters. INVALID_ARGUMENT, naming
// the node and the reason, when the graph is not shape-generic: the named parameters
// disagree on the extent, or an op moves, pads, reverses or concatenates along a varying
// dimension 0, slices it other than to its first rows, reduces it with no longer dimension
// kept after the reduced ones (so rows would vary in length), or a reshape does not keep
// the extent in dimension 0.
StatusOr<ShapeClass> ClassifyShapes(const Graph& g);

// Returns `g` with every varying dimension 0 set to factor x `extent` (and the slice limits
// and pads that follow it); every other size, attribute and outer_parameters stay as they
// are. `shape_class` must be ClassifyShapes(g)'s.
Graph AtExtent(const Graph& g, const ShapeClass& shape_class, int64_t extent);

// Returns the parameter numbers of `g` whose dimension 0 is `extent`, in order: the outer
// parameters of a subgraph cut from a program whose batch (or batch x sequence, folded into
// rows) is `extent`. Whether the graph then follows the extent is ClassifyShapes' call.
std::vector<int64_t> ParametersWithOuterExtent(const Graph& g, int64_t extent);

// Returns the graph a cache key and a compile of `g` use: `g` at its bucket's top extent
// when it is shape-generic; `g` without outer_parameters (exact shapes) otherwise. Sets
// `*served` to the extents the compiled bundle serves (lo == hi == the graph's own extent
// for an exact graph, or 0 when `g` names no outer parameters) and, when given,
// `*not_generic` to why an exact graph could not be classified.
Graph ToShapeClass(const Graph& g, Bucket* served, Status* not_generic = nullptr);

}  // namespace stitch
