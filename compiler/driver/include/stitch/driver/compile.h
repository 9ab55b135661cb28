// The compiler facade: a graph in, a verified key, a fusion plan and kernels out. This is
// what the daemon and stitchctl call; the layers behind it are usable on their own.
//
// Pipeline: verify -> key -> plan -> price -> emit LLVM -> PTX -> cubin (where the toolkit
// exists). Each stage's product is computed once and carried down: the target is resolved to
// its device once (Target), the key once (a caller that keys a graph before compiling it,
// as the daemon does, passes the key in), the baseline is planned once to price the plan.
//
// Thread-safety: CompileGraph may run concurrently on different graphs.
#pragma once

#include <string>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/codegen/codegen.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/key.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/plan.h"

namespace stitch {

// Which planner groups the graph into kernels.
enum class PlannerKind {
  kStitch,    // the stitching planner (stitch_planner.h): fewest bytes and launches
  kBaseline,  // XLA-style fusion (baseline_planner.h), the yardstick
};

struct CompileOptions {
  PlannerKind planner = PlannerKind::kStitch;
  CodegenOptions codegen;  // codegen.target is the target of every stage and of the key
  GraphLimits limits;
  std::string salt;      // cache namespace salt (part of the key)
  bool emit_ptx = true;  // false stops after LLVM IR (used by tests of the IR alone)
  // Caps the grid of global_stitch kernels (GpuDevice::max_persistent_grid_blocks); 0 keeps
  // the target's co-residency bound.
  int64_t max_persistent_grid_blocks = 0;
};

// Wall-clock milliseconds of each stage.
struct CompileTimings {
  double verify_ms = 0, plan_ms = 0, emit_ms = 0, ptx_ms = 0, cubin_ms = 0;
  double to_ptx_ms() const { return verify_ms + plan_ms + emit_ms + ptx_ms; }
  double total_ms() const { return to_ptx_ms() + cubin_ms; }
};

struct CompileResult {
  CacheKey key;
  FusionPlan plan;
  // The cost model's estimates on the target's device: the plan above, and the XLA-style
  // baseline plan of the same graph (the same plan when the baseline planner made it).
  PlanCost cost;
  PlanCost baseline_cost;
  std::vector<CompiledKernel> kernels;  // one per plan kernel, same order
  std::vector<int> temporaries;         // nodes held in temporary buffers
  CompileTimings timings;
  // Why there is no cubin, when there is none ("PTX-only mode: ..."); empty otherwise.
  std::string cubin_note;
};

// Returns the key context the compiler uses for `options`. It probes the CUDA toolkit, so a
// caller keying many graphs under the same options builds it once.
KeyContext KeyContextFor(const CompileOptions& options);

// Compiles `g`: verifies it, keys it and compiles it. Returns the verifier's error for a
// malformed graph, UNIMPLEMENTED for ops the codegen does not handle, INTERNAL for LLVM or
// assembler failures. A missing CUDA toolkit is not an error: kernels then carry PTX only and
// cubin_note says so.
StatusOr<CompileResult> CompileGraph(const Graph& g, const CompileOptions& options);

// Compiles a graph that has passed Verify, whose key under `options` is `key`
// (ComputeKey(g, KeyContextFor(options))): the stages after keying, for a caller that
// verified and keyed the graph to look it up first. Errors as CompileGraph's, but for the
// verifier's.
StatusOr<CompileResult> CompileVerifiedGraph(const Graph& g, CacheKey key,
                                             const CompileOptions& options);

}  // namespace stitch
