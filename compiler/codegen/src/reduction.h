// Pieces shared by the row and column reduction emitters: the reduces a kernel computes,
// their index geometry, combiners, identities and warp shuffles.
#pragma once

#include <utility>
#include <vector>

#include "elemental_emitter.h"
#include "kernel_context.h"

namespace stitch::codegen {

// One reduce computed by a reduce kernel.
struct ReduceInfo {
  int node = -1;
  int input = -1;
  int init = -1;
  ReduceKind kind = ReduceKind::kSum;
  DType dtype = DType::kF32;
  llvm::Type* acc_ty = nullptr;  // the compute type (f32 for f16/bf16)
  llvm::AllocaInst* acc = nullptr;
  llvm::GlobalVariable* smem = nullptr;  // for emitters that exchange through shared memory
  bool is_output = false;
};

// The split of the hero's input dimensions into kept (output) and reduced ones.
struct ReduceGeometry {
  std::vector<int64_t> input_dims;
  std::vector<int> kept_pos, reduced_pos;  // input dimension numbers, ascending
  std::vector<int64_t> kept_sizes, reduced_sizes;
  int64_t kept = 1, reduced = 1;
  bool reduced_is_suffix = false;  // input linear = kept * reduced + r
  bool reduced_is_prefix = false;  // input linear = r * kept + k
  // Shape-generic kernels: whether the input's varying dimension 0 is kept or reduced, so
  // that `kept` or `reduced` follows the run's extent (KeptCount, ReducedCount).
  bool kept_varies = false;
  bool reduced_varies = false;
};

// Returns geo.kept and geo.reduced at the run's extent (KernelContext::RunCount).
llvm::Value* KeptCount(KernelContext& kc, const ReduceGeometry& geo);
llvm::Value* ReducedCount(KernelContext& kc, const ReduceGeometry& geo);

// The reduces of a reduce kernel: the hero first, then the other reduces in `outputs`.
// Every one must share the hero's input dims and reduced dimensions. Also returns the
// output nodes that are not reduces (epilogue nodes computed from the reduce results).
struct ReducePlan {
  std::vector<ReduceInfo> reduces;
  std::vector<int> epilogue;
  // Slots in spec.outputs of outputs with the reduce input's element count that read no
  // reduce: each element is computed and stored where the reduction visits it, so the
  // inputs they share with the reduces are read once. Only for reduced dimensions at either
  // end of the input (its elements are then visited by linear index).
  std::vector<size_t> side_outputs;
  // Slots in spec.outputs written once per output element k from the reduce results: the
  // reduces and the epilogue nodes.
  std::vector<size_t> kept_outputs;
  ReduceGeometry geometry;
};

// Validates the spec's hero and outputs and returns the plan; errors name the node.
StatusOr<ReducePlan> AnalyzeReduceKernel(KernelContext& kc);

// Returns the index of input element (kept k, reduced r) of the hero's input.
IrIndex InputIndex(KernelContext& kc, ElementalEmitter& em, const ReduceGeometry& geo,
                   llvm::Value* k, llvm::Value* r);

// Returns the identity of the combiner in the accumulator type.
llvm::Value* Identity(llvm::IRBuilder<>& b, const ReduceInfo& r);

// Returns a (+) c for the reduce's combiner (NaN-propagating max/min for floats).
llvm::Value* Combine(llvm::IRBuilder<>& b, const ReduceInfo& r, llvm::Value* a, llvm::Value* c);

// Stores the identity into every accumulator.
void InitAccumulators(KernelContext& kc, std::vector<ReduceInfo>& reduces);

// Accumulates the elements (kept k, reduced r) for r = start, start + step, ... below `end`,
// `loads_per_step` of them at a time: their values are all emitted before any is combined,
// so a thread has that many independent loads in flight, and they are combined in order, so
// the result is the one-at-a-time loop's. The elements past the last full step run one at
// a time.
//
// With `width` > 1, start, end and step count vectors of `width` consecutive reduced
// elements instead (vector q is elements q * width ... q * width + width - 1), which
// ReducedVectorWidthFits must allow: each is one access of every input whose elements the
// reduced ones are, and its elements are combined in order.
Status EmitAccumulateLoop(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                          llvm::Value* k, llvm::Value* start, llvm::Value* end, int64_t step,
                          int loads_per_step, const char* name, int64_t width = 1);

// Whether vectors of `width` consecutive reduced elements are consecutive elements of the
// hero's input: its minor-most dimension is reduced and `width` divides it (and, in a
// shape-generic kernel, that dimension is not the one that varies).
bool ReducedVectorWidthFits(const ReduceGeometry& geo, int64_t width);

// One kept output a thread reduces beside others: its index, and the plan whose reduces'
// accumulators (ReduceInfo::acc) hold its partial results.
struct AccumulatedColumn {
  const ReducePlan* plan = nullptr;
  llvm::Value* k = nullptr;
};

// EmitAccumulateLoop for several kept outputs at once (a column reduction's lane of adjacent
// columns): each step emits every column's elements before combining any, so the loads of
// adjacent columns sit side by side and become vectors.
Status EmitAccumulateLoop(KernelContext& kc, ElementalEmitter& em,
                          const std::vector<AccumulatedColumn>& columns, llvm::Value* start,
                          llvm::Value* end, int64_t step, int loads_per_step, const char* name);

// Returns `v` reduced over groups of `width` consecutive lanes (lane 0 of each group holds
// the result) with shfl.sync.down on a full mask.
llvm::Value* WarpReduce(KernelContext& kc, const ReduceInfo& r, llvm::Value* v, int width);

// Returns `v` reduced over aligned groups of `width` lanes, in every lane of the group
// (butterfly shuffles on a full mask).
llvm::Value* WarpAllReduce(KernelContext& kc, const ReduceInfo& r, llvm::Value* v, int width);

// Returns the reduce info of reduce node `id` (accumulator not yet allocated), or an error
// naming the node when it is malformed.
StatusOr<ReduceInfo> MakeReduceInfo(KernelContext& kc, int id);

// The type a value of `acc_ty` is kept in shared memory (i1 is widened to i8).
llvm::Type* SharedType(llvm::Type* acc_ty);
llvm::Value* ToShared(llvm::IRBuilder<>& b, llvm::Value* v);
llvm::Value* FromShared(llvm::IRBuilder<>& b, llvm::Value* v, llvm::Type* acc_ty);

// Combines each reduce's partial result in `partials` with its init value and writes the
// outputs of output linear index `k` (reduces and epilogue nodes).
Status WriteReduceOutputs(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                          const std::vector<llvm::Value*>& partials, llvm::Value* k);

// Partial results of a split reduction (ThreadMapping::reduce_chunks) in the kernel's
// workspace: per reduce, an array of chunks x kept values of SharedType(acc_ty), chunk-major
// (chunk c of output k at c * kept + k), each array 256-byte aligned, from
// kc.workspace_offset on.
struct PartialArrays {
  std::vector<llvm::Value*> base;  // one i8 pointer per reduce of the plan
  int64_t chunks = 1;
  uint64_t end_offset = 0;  // the first workspace byte after the arrays
};

// Lays out the partial arrays of `plan` in kc.workspace. Returns INTERNAL when the kernel
// has no workspace.
StatusOr<PartialArrays> LayoutPartials(KernelContext& kc, const ReducePlan& plan, int64_t chunks);

// Stores `partials[j]` (one per reduce) as chunk `chunk` of output `first` + j, for every j:
// a column lane's adjacent outputs, whose stores merge into one access.
void StoreColumnPartials(KernelContext& kc, const ReducePlan& plan, const PartialArrays& arrays,
                         const std::vector<std::vector<llvm::Value*>>& partials, llvm::Value* chunk,
                         llvm::Value* first);

// Loads chunk `chunk` of outputs `first` .. `first` + width - 1, per output one value per
// reduce (in its accumulator type): the loads StoreColumnPartials' stores pair with. Only
// for a kernel that has written them and made them visible (a grid barrier, or
// EmitLastArrival).
std::vector<std::vector<llvm::Value*>> LoadColumnPartials(KernelContext& kc, const ReducePlan& plan,
                                                          const PartialArrays& arrays,
                                                          llvm::Value* chunk, llvm::Value* first,
                                                          int width);

// Stores `partials` (one per reduce) as chunk `chunk` of output `k`.
void StorePartials(KernelContext& kc, const ReducePlan& plan, const PartialArrays& arrays,
                   const std::vector<llvm::Value*>& partials, llvm::Value* chunk, llvm::Value* k);

// Emits a grid barrier and then the second stage of a split reduction: a warp per output
// combines its chunks' partials and writes the kernel's outputs for it.
Status EmitCombinePartials(KernelContext& kc, ElementalEmitter& em, const ReducePlan& plan,
                           const PartialArrays& arrays);

// Returns the [lo, hi) range of reduced elements of chunk `chunk` when `reduced` elements
// are split into `chunks` chunks of equal size (the last may be shorter or empty).
std::pair<llvm::Value*, llvm::Value*> ChunkRange(KernelContext& kc, llvm::Value* reduced,
                                                 int64_t chunks, llvm::Value* chunk);

// The lanes of a warp loop over groups of `rows`: each row has `lanes` lanes (a power of
// two up to 32), so a warp holds 32 / lanes rows; threadIdx.y picks the warp in the block
// (`warps_per_block` of them) and the warps stride over the groups through the grid. Calls
// body(row, valid, seg) once per group: `valid` is false for the padding rows of the last
// group and `seg` is the lane's place in its row. All lanes of a warp run the same
// iterations, so full-mask shuffles in `body` are executed by the whole warp.
using WarpRowBody = std::function<Status(llvm::Value* row, llvm::Value* valid, llvm::Value* seg)>;
Status EmitWarpRowLoop(KernelContext& kc, llvm::Value* rows, int lanes, int64_t warps_per_block,
                       const WarpRowBody& body);

}  // namespace stitch::codegen
