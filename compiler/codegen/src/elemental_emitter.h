// Computes the value of a graph node at a multi-index, in registers.
//
// Inputs of the kernel are loaded from their buffers; elementwise ops combine their
// operands' values at the same index; data-movement ops rewrite the index; constants, iota
// and rng-uniform are computed in place. Values are memoised per (node, index values) so
// that shared subexpressions are emitted once per scope. Emission is iterative (an explicit
// work stack), so deep graphs do not exhaust the native stack.
#pragma once

#include <map>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "kernel_context.h"
#include "trig.h"

namespace stitch::codegen {

// A position in a node's index space: the per-dimension indices, the row-major linear
// index, or both. At least one is known; the other is derived on demand.
struct IrIndex {
  std::vector<llvm::Value*> dims;  // empty unless known (or the rank is 0)
  llvm::Value* linear = nullptr;
};

class ElementalEmitter {
 public:
  explicit ElementalEmitter(KernelContext& kc);

  // Returns the compute-type value of `node` at `index`, emitting IR at the builder's
  // insertion point. Errors name the node: UNIMPLEMENTED for ops that cannot be computed
  // inside this kernel (e.g. a reduce that is not the kernel's hero), INVALID_ARGUMENT for
  // malformed nodes.
  StatusOr<llvm::Value*> Emit(int node, const IrIndex& index);

  // Emits only the buffer loads that Emit(node, {{}, linear}) would make, for every node at
  // every linear index, memoised for it: a vector's loads issued before any of its math are
  // all in flight at once, and the backend's vectorizer can merge them, which it cannot
  // across the math library's inline assembly. The lanes of a vector of sub-word elements
  // load as one access of i32 words where the backend would split them (AccessedAsWords).
  // Stops at pinned and seeded values and at reduces; errors are left to Emit.
  //
  // `widening` says where each loaded element becomes its compute type: kAtLoad converts
  // them all next to their loads; kAtFirstUse converts each where Emit first reads it, so
  // a vector of narrow elements stays packed in its storage registers while earlier lanes'
  // math runs (eight f16 lanes are four registers, not eight).
  enum class Widening { kAtLoad, kAtFirstUse };
  void EmitLoads(const std::vector<int>& nodes, const std::vector<llvm::Value*>& linears,
                 Widening widening = Widening::kAtLoad);

  // Returns whether computing any of `nodes` calls the math library for more than one
  // instruction (erf, log, tanh, exact exp, ...; not rsqrt or the approximate exp and
  // division): such a body holds branches and inline assembly, which end the straight line
  // within which the backend's vectorizer merges accesses. Looks through elementwise and
  // data-movement nodes of the kernel down to its inputs, as EmitLoads does.
  bool CallsMathLibrary(const std::vector<int>& nodes) const;

  // Forgets every memoised value; call when moving to code that the values emitted so far
  // do not dominate.
  void ResetScope();

  // Records that `node` at linear index `linear` is `value` (used for reduce results
  // consumed by epilogue nodes).
  void Seed(int node, llvm::Value* linear, llvm::Value* value);

  // Makes every later access to `node` read `slot` (an entry-block alloca the caller has
  // stored the node's compute-type value into), whatever the index. Survives ResetScope.
  // Used for a row's reduce results in row-stitched kernels, where the planner has proved
  // that every access is to the current row.
  void PinAnyIndex(int node, llvm::AllocaInst* slot);
  // Makes accesses to `node` at exactly linear index `linear` read `slot`. Survives
  // ResetScope. Used for values a thread keeps in registers between the phases of a row.
  void Pin(int node, llvm::Value* linear, llvm::AllocaInst* slot);
  // The same for a slot anywhere in memory (shared memory, for a row too long for
  // registers), holding a value of `type` at `address` aligned to `align`: the node's
  // compute-type value, or, with `stored`, an element of that dtype in its storage type,
  // widened where it is read.
  struct Slot {
    Slot() = default;
    Slot(llvm::Value* address, llvm::Type* type, llvm::Align align,
         std::optional<DType> stored = std::nullopt)
        : address(address), type(type), align(align), stored(stored) {}
    llvm::Value* address = nullptr;
    llvm::Type* type = nullptr;
    llvm::Align align;
    std::optional<DType> stored;
  };
  void Pin(int node, llvm::Value* linear, const Slot& slot);
  // Forgets every pin.
  void ClearPins();
  // Returns the value memoised for `node` at linear index `linear` in the current scope,
  // or nullptr.
  llvm::Value* Lookup(int node, llvm::Value* linear) const;

  // Returns the linear indices of the `width` consecutive elements that start at `first`, a
  // multiple of `width`: first (frozen), first + 1, ... The indices of each lane in every node
  // whose innermost dimension the width divides are then the first lane's with the offset
  // added to the innermost one, so the lanes' loads and stores stay visibly adjacent and the
  // backend merges them into one vector access. Survives ResetScope.
  std::vector<llvm::Value*> VectorLanes(llvm::Value* first, int64_t width);

  // While set, an index whose last coordinate is another plus a constant (a vector's later
  // lane, built from coordinates rather than VectorLanes) is linearised as the other's
  // linear index plus the constant, so that the lanes' loads merge (AddLast). Set by the row
  // tiles' staging; every other kernel keeps the code its GPU runs measured until the next.
  void SetLaneOffsetsLast(bool on) { lane_offsets_last_ = on; }
  // While set, EmitLoads addresses an element a constant distance (up to kMaxVectorBytes
  // elements) after another element of the same buffer it loads, where its index shows the
  // distance (ConstantDistance), as that element's address plus the distance: the backend
  // then sees one base plus constant offsets however it extends the indices, and merges the
  // loads. Set by the resident row tiles' staging, whose lanes' indices NVPTX otherwise
  // zero-extends for the first lane and sign-extends for the others.
  void SetLaneAddressesFromFirst(bool on) { lane_addresses_from_first_ = on; }

  // Returns e^x of a floating-point compute-type value, as the graph's exp nodes compute it.
  llvm::Value* Exp(llvm::Value* x) { return CallMath("exp", {x}); }

  // Records that `linear` has the per-dimension indices `indices` in a row-major space of
  // `dims`, for Delinearize to return (and to build its vector lanes' indices on) instead of
  // dividing: a loop kernel that keeps each thread on its columns passes them loop-invariant.
  // Forgotten by ResetScope.
  void SeedDelinearization(llvm::Value* linear, const std::vector<int64_t>& dims,
                           std::vector<llvm::Value*> indices) {
    delin_[{linear, dims}] = std::move(indices);
  }
  // Returns per-dimension indices of `linear` in a row-major space of `dims`.
  std::vector<llvm::Value*> Delinearize(llvm::Value* linear, const std::vector<int64_t>& dims);
  // Returns the row-major linear index of `idx` in a space of `dims`, one value per index
  // until ResetScope.
  llvm::Value* Linearize(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& dims);

 private:
  using Key = std::tuple<int, llvm::Value*, std::vector<llvm::Value*>>;
  struct Frame {
    int node = -1;
    IrIndex index;
    bool expanded = false;
    std::vector<IrIndex> operand_index;
    llvm::Value* aux = nullptr;  // pad: "inside the operand" flag
  };
  static Frame MakeFrame(int node, IrIndex index) {
    Frame f;
    f.node = node;
    f.index = std::move(index);
    return f;
  }

  Key KeyOf(int node, const IrIndex& index) const;
  // Loads element `index` of the kernel input `node` from `buffer` and memoises it.
  void LoadInput(int node, const IrIndex& index, llvm::Value* buffer);
  // Loads and memoises the kernel input elements `inputs` in order, the lanes of a vector
  // that PackedVectors finds in one input together, where the first of them is.
  void LoadInputs(const std::vector<std::pair<int, IrIndex>>& inputs, Widening widening);
  // The address of element `index` of a buffer of `dtype` as an element of `loaded` (indices
  // and addresses of the buffer's elements loaded before it) plus their distance, where an
  // index within a vector's width before it shows one; nullptr otherwise
  // (SetLaneAddressesFromFirst).
  llvm::Value* AddressAfter(const std::vector<std::pair<llvm::Value*, llvm::Value*>>& loaded,
                            DType dtype, llvm::Value* index);
  // An element loaded but not yet widened (EmitLoads' kAtFirstUse): its storage-type value,
  // or lane `lane` of a vector of words (LoadPackedWords) when `lane` is not negative.
  struct Stored {
    DType dtype;
    llvm::Value* value;
    int64_t lane;
  };
  // The compute-type value of `stored`, emitted at the builder's insertion point.
  llvm::Value* Widened(const Stored& stored);
  llvm::Value* PinnedValue(int node, const IrIndex& index);
  IrIndex Normalize(int node, const IrIndex& index);
  const std::vector<llvm::Value*>& DimsOf(IrIndex& index, const std::vector<int64_t>& shape);
  // Linearize's linear index of the coordinates in `key` but the last, times the last size:
  // one value per such prefix in a scope, so that indices differing in their last coordinate
  // alone share it.
  llvm::Value* Scaled(const std::pair<std::vector<llvm::Value*>, std::vector<int64_t>>& key,
                      llvm::Value* leading);
  // Linearize's linear index of the coordinates in `key`: Scaled plus the last coordinate.
  llvm::Value* AddLast(const std::pair<std::vector<llvm::Value*>, std::vector<int64_t>>& key,
                       llvm::Value* leading);
  llvm::Value* LinearOf(const IrIndex& index, const std::vector<int64_t>& shape);
  Status CheckNode(int node) const;
  // Sets f.operand_index, each operand's index for node f.node at f.index, one step per kind
  // of op; INVALID_ARGUMENT for a node whose attributes do not fit its shapes.
  Status PrepareOperands(Frame& f);
  Status ElementwiseOperands(Frame& f);
  Status ReshapeOperand(Frame& f);
  Status BroadcastOperand(Frame& f);
  Status TransposeOperand(Frame& f);
  Status SliceOperand(Frame& f);
  Status ReverseOperand(Frame& f);
  Status ConcatenateOperands(Frame& f);
  Status PadOperands(Frame& f);
  Status Malformed(const Frame& f, const std::string& what) const;
  const std::vector<int64_t>& OperandDims(const Frame& f, size_t i) const;
  StatusOr<llvm::Value*> Compute(Frame& f);
  StatusOr<llvm::Value*> ComputeElementwise(int id, const std::vector<llvm::Value*>& ops);
  llvm::Value* ComputeConstant(int id, const IrIndex& index);
  llvm::Value* CallMath(const char* name, const std::vector<llvm::Value*>& args);
  // The Philox block (i64) of rng-uniform's linear index `k` and its word in it (i32;
  // stitch/ir/philox.h). The lanes of a vector whose width is a multiple of four take their
  // block from the vector's first lane, so that LLVM sees one block, and computes one
  // evaluation, for every four of them: VectorLanes' vectors start at a multiple of their
  // width, as their memory accesses do, so lane e's block is the first's plus e / 4.
  std::pair<llvm::Value*, llvm::Value*> RngBlockOf(llvm::Value* k);
  // `fn` of x: stitch's own for f32 (trig.h), libdevice's `libdevice_name` for f64.
  llvm::Value* Trig(TrigFunction fn, const char* libdevice_name, llvm::Value* x);
  // e^x as node `node` computes it: approximate (ex2.approx.ftz.f32 of x * log2(e)) for f32 where
  // kc_.ApproximateMath(node) allows, libdevice's exp elsewhere.
  llvm::Value* ExpOf(int node, llvm::Value* x);
  // tanh(x) as node `node` computes it: for f32 where kc_.ApproximateMath(node) allows,
  // copysign(1 - 2 / (1 + e^2|x|), x) with the approximate exp and division (MUFU.EX2 and
  // MUFU.RCP, about nine SASS instructions), at their bounds within 2.2e-7 of tanh for
  // |x| < 0.5 and 2.2e-7 relative above (suite_approximate_math_test); libdevice's tanh
  // elsewhere (about 25: that form and a polynomial for |x| < 0.6, both evaluated and one
  // selected, with its own subnormal handling). Not tanh.approx.f32: its 2^-11 relative bound
  // can round a value to a narrow type an ulp away from the exact tanh's, and a softmax after
  // it moves a probability by that ulp of its logit (suite row #13's soft-capped logits: an
  // ulp of 0.25 near 50, 28% of the probability).
  llvm::Value* TanhOf(int node, llvm::Value* x);
  // erf(x) as node `node` computes it: stitch's quotient of polynomials over div.approx.ftz.f32
  // (approximate_erf.h) for f32 where kc_.ApproximateMath(node) allows, libdevice's erf
  // elsewhere.
  llvm::Value* ErfOf(int node, llvm::Value* x);
  llvm::Value* Clamp(llvm::Value* v, int64_t hi);

  KernelContext& kc_;
  llvm::IRBuilder<>& b_;
  std::unordered_set<int> in_kernel_;
  std::map<Key, llvm::Value*> memo_;
  std::map<Key, Stored> stored_;  // loaded, widened when Emit first reads them
  std::map<int, llvm::AllocaInst*> pinned_any_;
  std::map<std::pair<int, llvm::Value*>, Slot> pinned_;
  std::map<std::pair<llvm::Value*, std::vector<int64_t>>, std::vector<llvm::Value*>> delin_;
  std::map<std::pair<std::vector<llvm::Value*>, std::vector<int64_t>>, llvm::Value*> lin_;
  struct Lane {
    llvm::Value* first;
    int64_t offset;
    int64_t width;
  };
  std::map<llvm::Value*, Lane> lanes_;
  // The first lane of each vector VectorLanes made, with its width.
  std::map<llvm::Value*, int64_t> vector_starts_;
  // A later lane's innermost coordinate, as Delinearize forms it from the first lane's:
  // Linearize of an index ending in it is then a lane of the index ending in the first's.
  std::map<llvm::Value*, Lane> lane_coordinates_;
  std::map<int, llvm::GlobalVariable*> constant_arrays_;
  size_t max_stack_ = 0;
  bool lane_offsets_last_ = false;
  bool lane_addresses_from_first_ = false;
};

}  // namespace stitch::codegen
