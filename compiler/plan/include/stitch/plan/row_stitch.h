// The analysis behind row-stitched kernels (KernelKind::kRowStitch), shared by the planner,
// the scheduler and codegen so that all three agree on what such a kernel computes.
//
// A row-stitched kernel owns whole rows: every reduce in it reduces the minor-most
// `row_len` elements of an input with `rows * row_len` elements. Its outputs either have
// `rows * row_len` elements (one per row element, "row space") or `rows` (one per row);
// outputs of other sizes that do not depend on the kernel's reduces ride along in the same
// launch.
// It may also reduce over the rows: a column reduce sums a row-space value over every row,
// keeping the `row_len` columns (layernorm backward's dgamma and dbeta beside its row
// reductions for dx). A thread keeps its columns' partial results in registers across the
// rows it visits; such a kernel runs as a phase of a global_stitch kernel, which combines
// the blocks' partials after a grid barrier (AStitch's global scheme).
// Reduce results never leave the row they were computed for: the analysis proves that
// every use of a reduce inside the kernel reads the current row's value, following index
// arithmetic through elementwise ops, reshapes and broadcasts.
//
// Thread-safety: pure functions over a verified graph.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "stitch/base/status.h"
#include "stitch/ir/graph.h"
#include "stitch/ir/shape_class.h"
#include "stitch/plan/plan.h"

namespace stitch {

struct RowGeometry {
  int64_t rows = 0;
  int64_t row_len = 0;
  bool operator==(const RowGeometry& o) const { return rows == o.rows && row_len == o.row_len; }
};

// Returns the row geometry of reduce node `id` when its reduced dimensions are the
// minor-most non-trivial dimensions of its input (and it reduces at least two elements);
// nullopt otherwise.
std::optional<RowGeometry> RowGeometryOf(const Graph& g, int id);

// A sum over the row of exp(x - m), where m is a max reduce of the same kernel over the same
// x (softmax's normalizer), through converts, broadcasts and reshapes only. Such a sum can
// run in its max's pass: each thread keeps its sum relative to its running max and rescales
// it by exp(old - new) whenever the max grows (the online normalizer), so the threads'
// partial sums meet relative to the row's max. A row that is not kept in registers is then
// read once less.
struct RescaledSum {
  int max_reduce = -1;
  int sum_reduce = -1;
};

struct RowStitchLayout {
  RowGeometry geometry;
  // Reduces grouped into phases: the reduces of phase p read only reduces of earlier
  // phases, so each phase is one pass over the row; a rescaled sum shares its max's phase
  // where the kernel's mapping asks for it (ThreadMapping::rescaled_sums_in_one_pass).
  std::vector<std::vector<int>> phases;
  // Every sum of the kernel that could run in its max's pass, whether or not it does.
  std::vector<RescaledSum> rescaled_sums;
  // Outputs with one element per row element, and with one element per row.
  std::vector<int> row_space_outputs;
  std::vector<int> row_outputs;
  // Outputs of any other size, which must not read the kernel's reduces: they are computed
  // by a grid-stride loop of their own in the same launch (the independent scheme).
  std::vector<int> independent_outputs;
  // Reduces over the rows, keeping the row_len columns; they read row-space values in the
  // output pass. Outputs with row_len elements computed from their results at their own
  // column (the reduces themselves, conversions, scalings).
  std::vector<int> column_reduces;
  std::vector<int> column_outputs;
  // Row-space values read in more than one pass (loaded inputs and heavy ops): a thread
  // keeps its elements of them in registers after the first pass.
  std::vector<int> cached;
  // For each cached node, the first pass that computes it (a phase index, or
  // phases.size() for the final output pass).
  std::vector<int> cached_first_pass;
  // For each cached node, how many passes read it: a row kept in loop mode (not in
  // registers) is read from memory this many times.
  std::vector<int> cached_pass_count;
  // What a thread keeps in registers between passes to give the later passes the cached
  // values (only where the row stays in registers, values_per_thread > 0): a cached value,
  // or the row-space node that every later pass reads it through, so that those passes
  // recompute and reload nothing under it (x + bias kept instead of x: the bias is not
  // loaded again). Each with the first pass that computes it.
  std::vector<int> kept;
  std::vector<int> kept_first_pass;
  // For each kept value, the last pass that reads it back (its first pass where none does):
  // pass p reads what the passes before it kept, and computes the rest.
  std::vector<int> kept_last_pass;
  // Values with one element per row, read only at the current row and computed from loaded
  // inputs without any of the kernel's reduces (the one-pass statistics' shift x[row, 0], a
  // per-row scale): a thread computes each once per row and pass that reads it, at the pass's
  // start, and the pass's reads take it from a register instead of loading it again for every
  // element. Computed again in a later pass, it is not live across the row reductions between.
  std::vector<int> row_invariants;
  // For each row invariant, the passes that read it (phase indices, and phases.size() for the
  // final output pass), in increasing order.
  std::vector<std::vector<int>> row_invariant_passes;
};

// Where a block whose row's kept values live in shared memory (ThreadMapping::
// dynamic_shared_bytes) holds each of them: `offsets[i]` is the byte offset of kept value i's
// region, row_len values of its compute type (f32 for f16 and bf16, a byte for a predicate),
// each thread's slots at the columns it owns. Regions start 16-byte aligned, for vector
// accesses. A value first computed in the pass that last reads another value of the same
// element size takes over that value's region: a thread reads the old value at a position
// before it stores the new one there (softmax's exp(x - max) replaces x), so the regions of
// `bytes` hold no more than what is live at once.
struct SharedRowRegions {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};
SharedRowRegions SharedRowRegionsOf(const Graph& g, const RowStitchLayout& layout);

// The bytes a kept value of `dtype` takes per element, in registers or in shared memory: its
// compute type's (f16 and bf16 compute in f32; a predicate is stored as a byte).
int64_t KeptValueBytes(DType dtype);

// Returns whether reduce node `id` reduces a value of `geo.rows * geo.row_len` elements over
// its leading dimensions, keeping the trailing `row_len` elements: a column reduce of `geo`.
bool IsColumnReduceOf(const Graph& g, int id, const RowGeometry& geo);

// Returns whether `layout` computes rescaled sum `s` in its max's pass.
bool InOnePass(const RowStitchLayout& layout, const RescaledSum& s);

// Analyses a kernel spec as a row-stitched kernel. Returns UNIMPLEMENTED, naming the node,
// when the spec is not one: a reduce with another geometry, an output of another size that
// reads a reduce, a use of a row reduce's result at another row, or of a column reduce's
// result anywhere but in a column output at its own column.
//
// Outputs are told apart by their element counts. For a shape-generic graph at its top
// extent, pass its `shape_class`: an output whose count equals the rows' (or the row
// space's) at the top alone, because one of the two follows the extent and the other does
// not, is then independent, as it is at every other extent of the bucket.
StatusOr<RowStitchLayout> AnalyzeRowStitch(const Graph& g, const KernelSpec& spec,
                                           const ShapeClass* shape_class = nullptr);

}  // namespace stitch
