// Tests of the op list (op_list.h) against the wire format: every op has its stitch.v1.OpCode
// value, every wire value is an op, and each op survives the trip through the wire.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "stitch/ir/graph.h"
#include "stitch/ir/graph_proto.h"

namespace stitch {
namespace {

struct ListedOp {
  OpCode op;
  int wire;
  std::string_view proto_name;
  std::string_view name;
};

// Returns the op list as written, one entry per op.
std::vector<ListedOp> ListedOps() {
  return {
#define STITCH_OP(Enum, wire, Proto, name, ...) {OpCode::k##Enum, wire, #Proto, name},
#include "stitch/ir/op_list.h"
  };
}

TEST(ProtoOpList, EveryListedOpHasItsWireValue) {
  const google::protobuf::EnumDescriptor* wire = v1::OpCode_descriptor();
  for (const ListedOp& listed : ListedOps()) {
    SCOPED_TRACE(std::string(listed.name));
    const google::protobuf::EnumValueDescriptor* value =
        wire->FindValueByName(std::string(listed.proto_name));
    ASSERT_NE(value, nullptr);
    EXPECT_EQ(value->number(), listed.wire);
    EXPECT_EQ(static_cast<int>(listed.op), listed.wire);
  }
}

TEST(ProtoOpList, EveryWireValueIsAListedOp) {
  const google::protobuf::EnumDescriptor* wire = v1::OpCode_descriptor();
  std::set<int> listed;
  for (const ListedOp& op : ListedOps()) listed.insert(op.wire);
  int specified = 0;
  for (int k = 0; k < wire->value_count(); ++k) {
    const int number = wire->value(k)->number();
    if (number == v1::OP_UNSPECIFIED) continue;
    ++specified;
    EXPECT_TRUE(listed.count(number)) << wire->value(k)->name();
    EXPECT_TRUE(IsKnownOpCode(static_cast<OpCode>(number))) << wire->value(k)->name();
  }
  EXPECT_EQ(specified, static_cast<int>(listed.size()));
  EXPECT_FALSE(IsKnownOpCode(static_cast<OpCode>(v1::OP_UNSPECIFIED)));
}

TEST(ProtoOpList, NamesAreUniqueAndSurviveTheWire) {
  std::set<std::string_view> names;
  for (const ListedOp& listed : ListedOps()) {
    EXPECT_EQ(OpCodeName(listed.op), listed.name);
    EXPECT_TRUE(names.insert(listed.name).second) << listed.name << " is listed twice";
    Graph g;
    Node n;
    n.op = listed.op;
    g.Add(n);
    v1::Graph p = ToProto(g);
    ASSERT_EQ(p.nodes_size(), 1);
    EXPECT_EQ(static_cast<int>(p.nodes(0).op()), listed.wire);
    StatusOr<Graph> back = FromProto(p);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->nodes[0].op, listed.op);
  }
}

TEST(ProtoOpList, UnknownWireValuesAreRejected) {
  v1::Graph p;
  v1::Node* n = p.add_nodes();
  n->set_name("x");
  n->set_op(static_cast<v1::OpCode>(9));
  n->mutable_shape()->set_dtype(v1::F32);
  StatusOr<Graph> g = FromProto(p);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "node 0 'x': op code 9 is unknown or unspecified");
  EXPECT_EQ(OpCodeName(static_cast<OpCode>(9)), "invalid-op");
}

// Only ops that compute something can be costly to recompute: a planner reuses their value
// instead of recomputing it, which for a leaf, a layout op or a reduce would mean nothing.
TEST(ProtoOpList, OnlyComputingOpsAreCostly) {
  int costly = 0;
  for (const ListedOp& listed : ListedOps()) {
    if (CostOf(listed.op) != OpCost::kCostly) continue;
    ++costly;
    const OpClass cls = ClassOf(listed.op);
    EXPECT_TRUE(cls == OpClass::kElementwise || cls == OpClass::kRng) << listed.name;
  }
  EXPECT_GT(costly, 0);
  EXPECT_EQ(CostOf(OpCode::kExp), OpCost::kCostly);
  EXPECT_EQ(CostOf(OpCode::kAdd), OpCost::kCheap);
  EXPECT_EQ(CostOf(static_cast<OpCode>(9)), OpCost::kCheap);
}

}  // namespace
}  // namespace stitch
