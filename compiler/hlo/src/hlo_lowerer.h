// The HLO lowering's internals: lowered values, the Lowerer that builds the graph, and the
// handlers that lower one HLO instruction each. hlo_lower.cc drives the lowering and picks
// each instruction's handler by its opcode; the handlers live in hlo_lower_*.cc by topic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "hlo_ast.h"
#include "stitch/base/status.h"
#include "stitch/hlo/hlo_import.h"
#include "stitch/ir/graph.h"

namespace stitch::hlo {

// Returns "<source>:<line>", the prefix of every message about a line of the text.
std::string Where(const std::string& source, int line);

// Returns the computation of `m` called `raw_name` (with or without its '%'), or null.
const HloComputation* FindComputation(const HloModule& m, std::string_view raw_name);

// Returns the minor-to-major order written in `s`'s layout, or an empty vector when none was
// written or it is the default (row-major) one. INVALID_ARGUMENT when the layout is not a
// permutation of the rank.
StatusOr<std::vector<int64_t>> NormaliseLayout(const HloShape& s, const std::string& where);

// Returns the major-to-minor order of `m2m`: physical dimension k holds logical dimension
// result[k].
std::vector<int64_t> MajorToMinor(const std::vector<int64_t>& m2m);

// Returns the permutation that undoes `perm`.
std::vector<int64_t> InversePermutation(const std::vector<int64_t>& perm);

// Returns OK when every array of `s` has static dims and an element type stitch supports;
// UNIMPLEMENTED otherwise, INVALID_ARGUMENT for tuples nested too deep.
Status CheckShapeSupported(const HloShape& s, const std::string& where, int depth = 0);

// Returns the combiners of reducer `c` of an n-input reduce when its output i is
// `op(param i, param i+n)` with op one of add, multiply, maximum, minimum, and, or; nullopt
// for any other computation (converts, index tracking, ...).
std::optional<std::vector<ReduceKind>> AnalyseReducer(const HloComputation& c, size_t n);

// A lowered HLO value: one IR node (with the layout its HLO shape declared), or a tuple.
struct Value {
  int node = -1;
  std::vector<int64_t> m2m;  // empty: default layout
  bool is_tuple = false;
  std::vector<Value> elems;
};

// Returns the array value of `node`, in the default layout.
Value Leaf(int node);

// One HLO instruction being lowered, its operands already lowered.
struct Instr {
  const HloInstruction& ins;
  // The IR op the op list maps the instruction's opcode to, when it maps it to one.
  std::optional<OpCode> op;
  std::vector<const Value*> operands;
  std::vector<const HloInstruction*> operand_ins;  // for messages
  // Inside a called computation, the caller's operands; null at the top level.
  const std::vector<Value>* args = nullptr;
  std::string where;
  // The result's shape and layout (empty: default), for handlers of single-array results.
  Shape shape;
  std::vector<int64_t> m2m;

  // Returns INVALID_ARGUMENT "<where>: <opcode> '<name>': <what>".
  Status Fail(const std::string& what) const;
  // Returns OK when the instruction has exactly `n` operands.
  Status NeedOperands(size_t n) const;
  // Returns the node of operand `k`, or an error when that operand is a tuple.
  StatusOr<int> ArrayOperand(size_t k) const;
  // Returns the text of attribute `key`, or null when the instruction has none.
  const std::string* Attr(const char* key) const;
  // Returns integer-list attribute `key` ("{1,0}"); empty when it is absent and not required.
  StatusOr<std::vector<int64_t>> IntListAttr(const char* key, bool required) const;
};

// Builds one graph from one HLO module. Not reusable: construct one per graph.
class Lowerer {
 public:
  Lowerer(const HloModule& m, const HloImportOptions& options) : m_(m), opt_(options) {}

  // Returns computation `comp` lowered as the graph's top level (see LowerComputation).
  StatusOr<Graph> Run(const HloComputation& comp, const std::string& graph_name);

  // Returns the value of called computation `c` (a fusion's body) on the caller's `args`.
  StatusOr<Value> LowerCall(const HloComputation& c, const std::vector<Value>& args) {
    return LowerComp(c, &args);
  }

  const HloModule& module() const { return m_; }

  // Appends `n` with the name and source of the instruction being lowered (n.name becomes a
  // suffix of the instruction's name) and returns its index.
  int Add(Node n);
  // Appends the node of an instruction's single-array result, with the shape and layout the
  // driver found for it, and returns that value.
  Value AddResult(const Instr& in, Node n);
  const Shape& ShapeOf(int node) const { return g_.nodes[node].shape; }

  // Each appends one node and returns its index. Reshape returns `x` itself when it already
  // has `dims`.
  int Transpose(int x, const std::vector<int64_t>& perm, const std::string& suffix);
  int Reshape(int x, const std::vector<int64_t>& dims, const std::string& suffix);
  int Broadcast(int x, const std::vector<int64_t>& dims, const std::vector<int64_t>& map,
                const std::string& suffix);
  int ScalarConst(DType t, double v, const std::string& suffix);

  // Returns the IR shape of array shape `s`, or an error when `s` is a tuple, not written,
  // unsupported or over the options' limits.
  StatusOr<Shape> ArrayShape(const HloShape& s, const std::string& where) const;

 private:
  // Returns RESOURCE_EXHAUSTED once inlined fusions have grown the graph far past the limit.
  Status CheckBudget() const;
  // Makes `ins` the instruction whose name and source new nodes take.
  void SetCursor(const HloInstruction& ins);
  // Appends the arrays of root value `v` to the graph's outputs, in its declared layouts.
  Status AddOutputs(const Value& v, const HloShape* declared, const std::string& where,
                    const HloInstruction& root, int depth);
  // Returns the value of computation `c`'s root; `args` are the caller's operands, null at
  // the top level. INVALID_ARGUMENT for calls nested too deep or recursive.
  StatusOr<Value> LowerComp(const HloComputation& c, const std::vector<Value>* args);
  StatusOr<Value> LowerCompBody(const HloComputation& c, const std::vector<Value>* args);
  // Makes the top-level parameters of `c` into `vals`, marking them in `made`.
  Status MakeTopLevelParameters(const HloComputation& c, std::vector<Value>* vals,
                                std::vector<bool>* made);
  // Returns a graph parameter of shape `s` (tuples flattened into several), read in its
  // written layout and transposed into the logical order.
  StatusOr<Value> MakeParameter(const HloShape& s, const std::string& where, int depth);
  // Returns the value of instruction `ins` from its handler, or UNIMPLEMENTED when stitch
  // does not support its opcode.
  StatusOr<Value> LowerInstr(const HloInstruction& ins, std::vector<const Value*> operands,
                             std::vector<const HloInstruction*> operand_ins,
                             const std::vector<Value>* args);

  const HloModule& m_;
  const HloImportOptions& opt_;
  Graph g_;
  int depth_ = 0;
  int64_t next_param_ = 0;
  std::set<const HloComputation*> active_;
  // Name and source of the instruction being lowered, given to the nodes it adds.
  std::string cur_name_, cur_source_;
};

// Lowers one instruction; the driver picks the handler by the instruction's opcode.
using OpHandler = StatusOr<Value> (*)(Lowerer& l, const Instr& in);

// hlo_lower_elementwise.cc: the ops of the op list with an HLO spelling and no handler of
// their own, then those that need more than their operands.
StatusOr<Value> LowerElementwise(Lowerer& l, const Instr& in);
StatusOr<Value> LowerCompare(Lowerer& l, const Instr& in);
StatusOr<Value> LowerSelectOrClamp(Lowerer& l, const Instr& in);

// hlo_lower_constant.cc.
StatusOr<Value> LowerConstant(Lowerer& l, const Instr& in);
StatusOr<Value> LowerIota(Lowerer& l, const Instr& in);

// hlo_lower_shape_ops.cc: ops that move data or change only the layout.
StatusOr<Value> LowerCopy(Lowerer& l, const Instr& in);
StatusOr<Value> LowerBroadcast(Lowerer& l, const Instr& in);
StatusOr<Value> LowerReshape(Lowerer& l, const Instr& in);
StatusOr<Value> LowerBitcast(Lowerer& l, const Instr& in);
StatusOr<Value> LowerTransposeOrReverse(Lowerer& l, const Instr& in);
StatusOr<Value> LowerSlice(Lowerer& l, const Instr& in);
StatusOr<Value> LowerConcatenate(Lowerer& l, const Instr& in);
StatusOr<Value> LowerPad(Lowerer& l, const Instr& in);

// hlo_lower_reduce.cc: reduces, and batch-norm expanded into reduces and elementwise ops.
StatusOr<Value> LowerReduce(Lowerer& l, const Instr& in);
StatusOr<Value> LowerBatchNorm(Lowerer& l, const Instr& in);

}  // namespace stitch::hlo
