// The stitch graph IR: a DAG of memory-intensive tensor ops with static shapes.
//
// A Graph owns its nodes in a vector; operands refer to nodes by index. Nodes are appended
// in any order by importers, so nothing here assumes topological order: call Verify()
// (verifier.h) before handing a graph to any other pass. Every pass after the verifier may
// assume a verified graph.
//
// Thread-safety: a Graph is a value. Concurrent reads are safe; writes need exclusive access.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/ir/dtype.h"

namespace stitch {

// Op codes, expanded from the op list (op_list.h), which gives each op's name, family and
// operands. The numeric values are part of the canonical key and of the wire format
// (stitch.v1.OpCode): never renumber, only append.
enum class OpCode : uint16_t {
#define STITCH_OP(Enum, wire, ...) k##Enum = wire,
#include "stitch/ir/op_list.h"
};

// Returns the op's spelling in stitch's own dumps (HLO names where HLO has one), or
// "invalid-op" for a value that is no op.
std::string_view OpCodeName(OpCode op);

enum class OpClass { kLeaf, kElementwise, kDataMovement, kReduce, kRng };

// The operand element types an elementwise op accepts.
enum class OperandDTypes {
  kAny,
  kFloat,    // floating point only
  kInteger,  // integers and pred only
};

// Where the element type of an op's result comes from.
enum class ResultDType {
  kOperand,   // the dtype of its value operands (the branches of a select)
  kPred,      // always pred (compare, is-finite)
  kDeclared,  // the node's declared shape (convert, leaves, rng)
};

// Whether recomputing an op in every consumer costs real time.
enum class OpCost {
  kCheap,
  kCostly,  // transcendentals, division, random numbers: computed once, then reused
};

// Returns true when `op` is one of the values above (wire input may hold anything).
bool IsKnownOpCode(OpCode op);

// Returns which family `op` belongs to; kLeaf for an unknown value.
OpClass ClassOf(OpCode op);

// Returns the number of operands the op takes, -1 when it is variadic (concatenate), or 0
// for an unknown value.
int Arity(OpCode op);

// Returns the operand element types `op` accepts; kAny for an unknown value.
OperandDTypes OperandDTypesOf(OpCode op);

// Returns where the result element type of `op` comes from; kDeclared for an unknown value.
ResultDType ResultDTypeOf(OpCode op);

// Returns what recomputing `op` costs; kCheap for an unknown value.
OpCost CostOf(OpCode op);

enum class CompareDirection : uint8_t { kEq = 1, kNe, kLt, kLe, kGt, kGe };
std::string_view CompareDirectionName(CompareDirection d);  // "EQ", "NE", ...
std::optional<CompareDirection> ParseCompareDirection(std::string_view s);

// The combiner of a reduce. Variadic HLO reduces whose combiner acts on each operand
// separately become one reduce per operand.
enum class ReduceKind : uint8_t { kSum = 1, kProd, kMax, kMin, kAnd, kOr };
std::string_view ReduceKindName(ReduceKind k);  // "sum", "max", ...
std::optional<ReduceKind> ParseReduceKind(std::string_view s);

// A dense row-major shape (layouts other than the default are normalised away by the
// importers into explicit transposes).
struct Shape {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;

  int rank() const { return static_cast<int>(dims.size()); }
  // Number of elements; 1 for scalars. Callers must have checked for overflow (the
  // verifier does), so this never overflows on a verified graph.
  int64_t elements() const;
  int64_t bytes() const { return elements() * DTypeBytes(dtype); }
  bool operator==(const Shape& o) const { return dtype == o.dtype && dims == o.dims; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  // "f32[2,3]".
  std::string ToString() const;
};

// The values of a constant. Floats are kept as doubles and integers as their 64-bit
// two's-complement bits. A literal holds either one value (a splat over the shape) or
// exactly shape.elements() values.
struct Literal {
  std::vector<double> f;   // used when the dtype is floating point
  std::vector<int64_t> i;  // used otherwise (u64 values are stored by bit pattern)
  size_t size() const { return f.empty() ? i.size() : f.size(); }
};

// One op. Attributes that an op does not use stay empty.
struct Node {
  std::string name;  // for messages only; never part of the cache key
  OpCode op = OpCode::kParameter;
  Shape shape;                // declared result shape; the verifier checks it
  std::vector<int> operands;  // indices into Graph::nodes

  // kParameter: position in the caller's argument list.
  int64_t parameter_number = -1;
  // kConstant.
  Literal literal;
  // kBroadcast: output dimension of each operand dimension.
  // kReduce: the reduced input dimensions.  kTranspose: the permutation (output dim i is
  // operand dim dimensions[i]).  kReverse: the reversed dimensions.
  // kConcatenate, kIota: a single dimension.
  std::vector<int64_t> dimensions;
  // kSlice: start/limit/stride per dimension.
  std::vector<int64_t> slice_starts, slice_limits, slice_strides;
  // kPad: low/high/interior per dimension; the pad value is operand 1.
  std::vector<int64_t> pad_low, pad_high, pad_interior;
  // kCompare.
  CompareDirection direction = CompareDirection::kEq;
  // kReduce: operands are {input, init}; init is a scalar of the same dtype.
  ReduceKind reduce_kind = ReduceKind::kSum;
  // kRngUniform: operands are {seed (u64 scalar)}; the stream id keeps the masks of
  // different rng nodes independent.
  int64_t rng_stream = 0;

  // Where the node came from, for error messages (e.g. "model.hlo:42"); optional.
  std::string source;
};

// The size limits every graph from outside must stay within (Verify, the HLO importer). They
// bound the work and memory one request can cost, not what the compiler could handle. Each
// is a key of stitchd's configuration, named in the messages of graphs past it.
struct GraphLimits {
  // Nodes of a graph, and entries of its output list (outputs may repeat nodes):
  // max_graph_nodes. A graph past it is refused whole; the HLO importer also stops a module
  // whose inlined fusions expand past twice this plus 1000 nodes.
  int64_t max_nodes = 20000;
  // Elements of any one tensor, parameter, intermediate or output: max_tensor_elements.
  // 2^34 elements is 64 GiB of f32, more than any GPU holds.
  int64_t max_elements_per_tensor = int64_t{1} << 34;
  // Dimensions of any one tensor: max_tensor_rank.
  int max_rank = 8;
};

// A dataflow graph with several outputs.
struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<int> outputs;  // node indices; a node may appear more than once
  // Parameter numbers whose dimension 0 varies from run to run: the graph's outer extent
  // (shape_class.h). Empty: every size is exact. The shapes in `nodes` are one run's.
  std::vector<int64_t> outer_parameters;

  // Appends `n` and returns its index.
  int Add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  // Returns the parameters ordered by parameter_number.
  std::vector<int> Parameters() const;
  // Returns, for each node, the indices of the nodes that use it (once per use).
  std::vector<std::vector<int>> Users() const;
};

// Returns the node indices in a topological order (operands first) that is deterministic
// for a given graph. Requires an acyclic graph with valid operand indices.
std::vector<int> TopologicalOrder(const Graph& g);

// Returns one flag per node of `g`: true for each of `roots` and every node they read,
// directly or through other nodes. Requires valid operand and root indices.
std::vector<bool> ReachedFrom(const Graph& g, std::vector<int> roots);

// Returns one flag per node of `g`: true for the nodes some output depends on.
std::vector<bool> LiveNodes(const Graph& g);

// Returns `g` without the nodes that no output reads; parameters stay, as they are the
// signature. Node order and outputs are kept. Requires every node's operands to come before it
// in `g.nodes` (as a rewrite that appends in topological order leaves them).
Graph WithoutDeadNodes(Graph g);

// Returns a multi-line human-readable dump, HLO-like.
std::string ToText(const Graph& g);

}  // namespace stitch
