// The compiler facade: a graph in, a verified key, a fusion plan and kernels out. This is
// what the daemon and stitchctl call; the layers behind it are usable on their own.
//
// Pipeline: verify -> key -> plan (the stitching planner and the baseline models) -> price
// and choose -> emit LLVM -> PTX -> cubin (where the toolkit exists).
//
// Never slower: the stitched plan and the plans of the compilers a job would otherwise run
// (baseline_models.h: XLA and Inductor) are priced with the same cost model on the target's
// device, and the stitched plan ships only when it is modelled no slower than the better of
// them. Otherwise the better baseline plan ships, compiled by stitch's own codegen, and the
// result says so. Each stage's product is computed once and carried down: the target is resolved to
// its device once (Target), the key once (a caller that keys a graph before compiling it,
// as the daemon does, passes the key in), the baseline is planned once to price the plan.
//
// Thread-safety: CompileGraph may run concurrently on different graphs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/codegen/codegen.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/key.h"
#include "stitch/ir/shape_class.h"
#include "stitch/plan/baseline_models.h"
#include "stitch/plan/cost_model.h"
#include "stitch/plan/plan.h"

namespace stitch {

// Which planner groups the graph into kernels.
enum class PlannerKind {
  // The stitching planner (stitch_planner.h), or the better baseline model where it is
  // modelled faster.
  kStitch,
  kXla,       // the XLA:GPU model alone (baseline_models.h)
  kInductor,  // the TorchInductor model alone
};

// Returns "stitch", "xla" or "inductor".
std::string_view PlannerKindName(PlannerKind planner);

struct CompileOptions {
  PlannerKind planner = PlannerKind::kStitch;
  // With kStitch: ship the better baseline model's plan where the stitched plan is modelled
  // slower. False ships the stitched plan regardless (tests and benchmarks of the stitcher).
  bool never_slower = true;
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

// A baseline model's plan of the compiled graph, priced on the target's device.
struct BaselineEstimate {
  BaselineCompiler compiler = BaselineCompiler::kXla;
  PlanCost cost;
  // The plan itself where the model's rewrites left the graph as it was (it plans the graph
  // the stitched plan does): once the shipped plan is assembled, its kernels that are the
  // same code as shipped ones are priced with the assembler's registers too.
  std::optional<FusionPlan> plan;
};

// The plans priced for a graph and the one that ships (see "Never slower" above).
struct PlanChoice {
  // The graph `plan` is a plan of: the compiled graph, or the graph a baseline model's
  // rewrites made of it when that model's plan ships. Its parameters and outputs are the
  // compiled graph's.
  Graph graph;
  FusionPlan plan;
  // The planner whose plan ships: kStitch, or the baseline model the stitched plan could not
  // beat.
  PlannerKind shipped = PlannerKind::kStitch;
  // The cost model's estimates: the plan that ships, the stitching planner's plan (whether
  // or not it ships; the shipped plan itself under kXla and kInductor), each baseline model's
  // plan that could be made, and the better of those (the stitched plan when none could).
  PlanCost cost;
  PlanCost stitched_cost;
  std::vector<BaselineEstimate> baselines;
  PlanCost baseline_cost;
  // The eager model's estimate (eager_model.h): what a job without any compiler runs. It
  // prices savings for such jobs and never ships; absent when the model cannot plan the graph.
  std::optional<PlanCost> eager_cost;
};

struct CompileResult : PlanChoice {
  CacheKey key;
  std::vector<CompiledKernel> kernels;  // one per plan kernel, same order
  std::vector<int> temporaries;         // nodes held in temporary buffers
  CompileTimings timings;
  // Why there is no cubin, when there is none ("PTX-only mode: ..."); empty otherwise.
  std::string cubin_note;
  // A shape-generic compile (shape_class.h): the outer extents the kernels serve, and the
  // shape class of `graph`, which is at the bucket's top extent (served.hi). For an exact
  // graph, served is {0, 0} and shape_class is empty. A graph of a shape class that a
  // planner's rewrite or a kernel kind cannot follow is compiled at the top extent alone:
  // served is {hi, hi}, shape_class is empty, and not_generic says why.
  Bucket served{0, 0};
  ShapeClass shape_class;
  std::string not_generic;
  bool shape_generic() const { return !shape_class.factor.empty(); }
};

// Returns the key context the compiler uses for `options`. It probes the CUDA toolkit, so a
// caller keying many graphs under the same options builds it once.
KeyContext KeyContextFor(const CompileOptions& options);

// Compiles `g`: verifies it, keys it and compiles it. A graph with outer_parameters is
// compiled for its shape class (ToShapeClass): the key and kernels serve its bucket, or, when
// it is not shape-generic, its exact shapes. Returns the verifier's error for a
// malformed graph, UNIMPLEMENTED for ops the codegen does not handle, INTERNAL for LLVM or
// assembler failures. A missing CUDA toolkit is not an error: kernels then carry PTX only and
// cubin_note says so.
StatusOr<CompileResult> CompileGraph(const Graph& g, const CompileOptions& options);

// Assembles `kernel` (lowered to PTX under `options`, scheduled with `mapping`) as
// CompileGraph does for what ships: where the cubin with fused multiply-adds spills, or sits
// within one register allocation unit of another block per SM, the kernel is lowered and
// assembled again without them and the better of the two kept (less local memory, then more
// blocks per SM). Returns the assembler's or LLVM's errors; without a CUDA toolkit the kernel
// keeps its PTX alone (AssembleCubin). A benchmark timing other mappings of a kernel assembles
// them here, so each is the code its plan would ship as.
Status AssembleKernel(CompiledKernel& kernel, const ThreadMapping& mapping,
                      const CodegenOptions& options);

// Plans a verified graph with the planner `options` names, priced on `device` (the
// target's device when compiling; benchmarks price other devices too). The plan that ships is
// chosen on PlanningDevice(device)'s prices (cost_model.h), the device the plans were searched
// for. Every planner plans the graph with its layout transposes folded (layout_transposes.h);
// under PlannerKind::kStitch, where that fold changed the graph, the graph as it came is
// planned too, and its choice ships where it prices lower. Returns the planners' errors.
StatusOr<PlanChoice> ChoosePlan(const Graph& g, const CompileOptions& options,
                                const GpuDevice& device);

// Compiles a graph that has passed Verify, whose key under `options` is `key`
// (ComputeKey(g, KeyContextFor(options))): the stages after keying, for a caller that
// verified and keyed the graph to look it up first. Errors as CompileGraph's, but for the
// verifier's.
// A graph with outer_parameters must be ToShapeClass's: the kernels then serve the bucket of
// its extent, planned at an odd extent inside it (nothing may rely on the extent's factors
// of two) and emitted for its top.
StatusOr<CompileResult> CompileVerifiedGraph(const Graph& g, CacheKey key,
                                             const CompileOptions& options);

}  // namespace stitch
