#include "stitch/ir/graph_proto.h"

#include <google/protobuf/util/json_util.h>

namespace stitch {
namespace {

// ToProto and FromProto cast op codes between the IR and the wire: every op of the op list
// must carry the number of its stitch.v1.OpCode value.
#define STITCH_OP(Enum, wire, Proto, ...)                               \
  static_assert(static_cast<int>(OpCode::k##Enum) == v1::OpCode::Proto, \
                "OpCode::k" #Enum " differs from stitch.v1." #Proto);
#include "stitch/ir/op_list.h"

template <typename Dst, typename Src>
void CopyInts(const Src& src, Dst* dst) {
  dst->Reserve(static_cast<int>(src.size()));
  for (auto v : src) dst->Add(v);
}

template <typename Src>
std::vector<int64_t> Ints(const Src& src) {
  return std::vector<int64_t>(src.begin(), src.end());
}

Status BadEnum(int node, const Node& n, const char* what, int value) {
  return InvalidArgument("node " + std::to_string(node) + " '" + n.name + "': " + what + " " +
                         std::to_string(value) + " is unknown or unspecified");
}

}  // namespace

v1::Graph ToProto(const Graph& g) {
  v1::Graph p;
  p.set_name(g.name);
  for (const Node& n : g.nodes) {
    v1::Node* q = p.add_nodes();
    q->set_name(n.name);
    q->set_op(static_cast<v1::OpCode>(n.op));
    q->mutable_shape()->set_dtype(static_cast<v1::DType>(n.shape.dtype));
    CopyInts(n.shape.dims, q->mutable_shape()->mutable_dims());
    CopyInts(n.operands, q->mutable_operands());
    q->set_parameter_number(n.parameter_number);
    CopyInts(n.literal.f, q->mutable_literal()->mutable_f());
    CopyInts(n.literal.i, q->mutable_literal()->mutable_i());
    CopyInts(n.dimensions, q->mutable_dimensions());
    CopyInts(n.slice_starts, q->mutable_slice_starts());
    CopyInts(n.slice_limits, q->mutable_slice_limits());
    CopyInts(n.slice_strides, q->mutable_slice_strides());
    CopyInts(n.pad_low, q->mutable_pad_low());
    CopyInts(n.pad_high, q->mutable_pad_high());
    CopyInts(n.pad_interior, q->mutable_pad_interior());
    if (n.op == OpCode::kCompare) q->set_direction(static_cast<v1::CompareDirection>(n.direction));
    if (n.op == OpCode::kReduce) q->set_reduce_kind(static_cast<v1::ReduceKind>(n.reduce_kind));
    q->set_rng_stream(n.rng_stream);
  }
  CopyInts(g.outputs, p.mutable_outputs());
  CopyInts(g.outer_parameters, p.mutable_outer_parameters());
  return p;
}

StatusOr<Graph> FromProto(const v1::Graph& p) {
  Graph g;
  g.name = p.name();
  g.nodes.reserve(p.nodes_size());
  for (int k = 0; k < p.nodes_size(); ++k) {
    const v1::Node& q = p.nodes(k);
    Node n;
    n.name = q.name();
    n.op = static_cast<OpCode>(q.op());
    if (!IsKnownOpCode(n.op)) return BadEnum(k, n, "op code", q.op());
    n.shape.dtype = static_cast<DType>(q.shape().dtype());
    if (DTypeBytes(n.shape.dtype) == 0) return BadEnum(k, n, "dtype", q.shape().dtype());
    n.shape.dims = Ints(q.shape().dims());
    n.operands.assign(q.operands().begin(), q.operands().end());
    n.parameter_number = q.parameter_number();
    n.literal.f.assign(q.literal().f().begin(), q.literal().f().end());
    n.literal.i.assign(q.literal().i().begin(), q.literal().i().end());
    n.dimensions = Ints(q.dimensions());
    n.slice_starts = Ints(q.slice_starts());
    n.slice_limits = Ints(q.slice_limits());
    n.slice_strides = Ints(q.slice_strides());
    n.pad_low = Ints(q.pad_low());
    n.pad_high = Ints(q.pad_high());
    n.pad_interior = Ints(q.pad_interior());
    if (n.op == OpCode::kCompare) {
      n.direction = static_cast<CompareDirection>(q.direction());
      if (CompareDirectionName(n.direction) == "invalid-direction") {
        return BadEnum(k, n, "compare direction", q.direction());
      }
    }
    if (n.op == OpCode::kReduce) {
      n.reduce_kind = static_cast<ReduceKind>(q.reduce_kind());
      if (ReduceKindName(n.reduce_kind) == "invalid-reduce") {
        return BadEnum(k, n, "reduce kind", q.reduce_kind());
      }
    }
    n.rng_stream = q.rng_stream();
    g.nodes.push_back(std::move(n));
  }
  g.outputs.assign(p.outputs().begin(), p.outputs().end());
  g.outer_parameters = Ints(p.outer_parameters());
  return g;
}

StatusOr<Graph> ParseGraphBinary(std::string_view bytes) {
  v1::Graph p;
  if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument("bytes are not a binary stitch.v1.Graph");
  }
  return FromProto(p);
}

StatusOr<Graph> ParseGraphJson(std::string_view json) {
  v1::Graph p;
  google::protobuf::util::JsonParseOptions options;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &p, options);
  if (!status.ok()) {
    return InvalidArgument("not a JSON stitch.v1.Graph: " + std::string(status.message()));
  }
  return FromProto(p);
}

std::string ToJson(const Graph& g) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(ToProto(g), &out, options);
  return out;
}

std::string ToBinary(const Graph& g) { return ToProto(g).SerializeAsString(); }

}  // namespace stitch
