// Shape classes on the suite (shape_class.h): each row's graph with its outer parameters
// named, the two extents its bucket's bundle runs at, the exact graphs it is compared with,
// and a check of the bucket's kernels against the reference interpreter. gpu_bench
// --buckets runs these on a GPU; its tests run the check on the host emulator, so both
// follow one rule.
//
// The rule: a row's outer extent e is dimension 0 of its first parameter, and its outer
// parameters are every parameter whose dimension 0 is e (ParametersWithOuterExtent): the
// suite's graphs put the batch (or batch x sequence as rows) first. The bundle of e's bucket
// (top/2, top] also runs at e' = 3 x top / 4, the middle of the bucket, or at the top when
// that is e, so each bucketed row is timed once at an extent other than its own.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/driver/compile.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/shape_class.h"
#include "stitch/reference/tensor.h"

namespace stitch::gpu {

// A graph with its outer parameters named at its own extent.
struct OuterNamed {
  Graph graph;         // outer_parameters: every parameter whose dimension 0 is `extent`
  int64_t extent = 0;  // e: dimension 0 of the first parameter
};

// Returns `g` with its outer parameters named by the rule above. INVALID_ARGUMENT when `g`
// has no parameter or its first is a scalar.
StatusOr<OuterNamed> NameOuterParameters(const Graph& g);

// Returns e' for a bundle serving `served` whose row's own extent is `extent` (rule above),
// kept inside [served.lo, served.hi].
int64_t SecondExtent(const Bucket& served, int64_t extent);

// Returns `named` at `extent` with no outer parameters: the graph an exact bundle for that
// extent compiles, and the interpreter evaluates. INVALID_ARGUMENT (ClassifyShapes' message)
// when `named` is not shape-generic.
StatusOr<Graph> ExactAt(const Graph& named, int64_t extent);

// Returns the graph a run of a shape-generic compile at `extent` takes: the compiled graph
// at that extent, which sizes every buffer.
Graph RunGraphAt(const CompileResult& compiled, int64_t extent);

// Returns why `compiled`, a compile of `named`, is not shape-generic: the compiler's reason
// (CompileResult::not_generic), else the classifier's.
std::string NotGenericReason(const Graph& named, const CompileResult& compiled);

// A bucket's kernels readied to run at e' and the interpreter's outputs there.
struct BucketCheck {
  CompileResult compiled;  // the bundle of the bucket of the graph's own extent
  int64_t extent = 0;      // e', the run's extent
  Graph run_graph;         // RunGraphAt(compiled, extent)
  Graph reference;         // ExactAt(named graph, extent): what the interpreter evaluated
  std::vector<Tensor> inputs;
  std::vector<Tensor> expected;
};

// Names `outer_parameters` (the full-shape row's, so that a size the scaling brings to the
// extent's does not join them) the outer parameters of `g`, its emulation-scale graph,
// compiles it for its bucket with `options`, and draws inputs at e' from `seed` for the
// interpreter and for a run of the bucket's kernels. FAILED_PRECONDITION with
// NotGenericReason when the compile is not shape-generic; INVALID_ARGUMENT for an empty or
// out-of-range list; the compiler's and the interpreter's errors otherwise.
StatusOr<BucketCheck> PrepareBucketCheck(const Graph& g,
                                         const std::vector<int64_t>& outer_parameters,
                                         const CompileOptions& options, uint64_t seed);

struct CheckOutcome {
  bool pass = true;
  double max_rel_error = 0;
  std::string message;  // the first mismatch, naming the output; empty when all pass
};

// Compares `got` (one tensor per output of a run of check.compiled) with check.expected,
// each within OutputTolerance of the reference graph.
CheckOutcome CompareWithReference(const BucketCheck& check, const std::vector<Tensor>& got);

}  // namespace stitch::gpu
