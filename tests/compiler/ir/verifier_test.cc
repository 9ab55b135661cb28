#include "stitch/ir/verifier.h"

#include <gtest/gtest.h>

#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Param;
using testing::Reduce;
using testing::Softmax;

void ExpectError(const Graph& g, StatusCode code, const std::string& fragment,
                 const GraphLimits& limits = {}) {
  Status s = Verify(g, limits);
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
}

TEST(Verifier, AcceptsSoftmax) { EXPECT_TRUE(Verify(Softmax(4, 8)).ok()); }

TEST(Verifier, RejectsCycleNamingANode) {
  Graph g;
  int p = Param(g, {DType::kF32, {4}}, 0);
  int a = Binary(g, OpCode::kAdd, p, p);
  int b = Binary(g, OpCode::kMul, a, p);
  g.nodes[a].operands[1] = b;  // a -> b -> a
  g.outputs = {b};
  ExpectError(g, StatusCode::kInvalidArgument, "cycle");
}

TEST(Verifier, RejectsDanglingOperand) {
  Graph g;
  int p = Param(g, {DType::kF32, {4}}, 0);
  int a = Binary(g, OpCode::kAdd, p, p);
  g.nodes[a].operands[1] = 17;
  g.outputs = {a};
  ExpectError(g, StatusCode::kInvalidArgument, "dangling operand 17");
}

TEST(Verifier, RejectsRankAndDimensionMismatch) {
  Graph g;
  int p = Param(g, {DType::kF32, {4}}, 0);
  int q = Param(g, {DType::kF32, {5}}, 1);
  g.outputs = {Binary(g, OpCode::kAdd, p, q)};
  ExpectError(g, StatusCode::kInvalidArgument, "no implicit broadcast");

  Graph h;
  int x = Param(h, {DType::kF32, {4, 3}}, 0);
  int r = Reduce(h, x, ConstScalar(h, DType::kF32, 0), {1}, ReduceKind::kSum);
  h.nodes[r].shape.dims = {3};  // declared wrong
  h.outputs = {r};
  ExpectError(h, StatusCode::kInvalidArgument, "differs from the inferred f32[4]");
}

TEST(Verifier, RejectsBadBroadcastMaps) {
  Graph g;
  int p = Param(g, {DType::kF32, {3}}, 0);
  int b = Broadcast(g, p, {4, 3}, {0});  // maps size 3 onto size 4
  g.outputs = {b};
  ExpectError(g, StatusCode::kInvalidArgument, "broadcast maps operand dim 0");

  g.nodes[b].dimensions = {5};
  ExpectError(g, StatusCode::kInvalidArgument, "out of range");

  Graph h;
  int q = Param(h, {DType::kF32, {2, 3}}, 0);
  h.outputs = {Broadcast(h, q, {3, 3, 2}, {2, 1})};
  ExpectError(h, StatusCode::kInvalidArgument, "not strictly increasing");
}

TEST(Verifier, RejectsUnknownDTypeAndOp) {
  Graph g;
  int p = Param(g, {DType::kF32, {4}}, 0);
  g.nodes[p].shape.dtype = static_cast<DType>(77);
  g.outputs = {p};
  ExpectError(g, StatusCode::kInvalidArgument, "unknown dtype 77");

  Graph h;
  int q = Param(h, {DType::kF32, {4}}, 0);
  int n = testing::Unary(h, OpCode::kNeg, q);
  h.nodes[n].op = static_cast<OpCode>(999);
  h.outputs = {n};
  ExpectError(h, StatusCode::kInvalidArgument, "unknown op code 999");
}

TEST(Verifier, RejectsElementCountOverflow) {
  Graph g;
  int p = Param(g, {DType::kF32, {int64_t{1} << 40, int64_t{1} << 30}}, 0);
  g.outputs = {p};
  ExpectError(g, StatusCode::kInvalidArgument, "overflows 64 bits");
}

TEST(Verifier, EnforcesConfiguredLimits) {
  Graph g;
  int p = Param(g, {DType::kF32, {8}}, 0);
  int x = p;
  for (int i = 0; i < 100; ++i) x = Binary(g, OpCode::kAdd, x, p);
  g.outputs = {x};
  GraphLimits limits;
  limits.max_nodes = 50;
  ExpectError(g, StatusCode::kResourceExhausted,
              "graph has 101 nodes, over the limit of 50 (max_graph_nodes)", limits);

  GraphLimits small;
  small.max_elements_per_tensor = 4;
  ExpectError(g, StatusCode::kResourceExhausted,
              "f32[8] has 8 elements, over the limit of 4 (max_tensor_elements)", small);
}

// Each limit admits a graph exactly at it and refuses one past it, naming the limit.
TEST(Verifier, LimitsAdmitTheLimitAndRefuseOnePast) {
  Graph g;
  int p = Param(g, {DType::kF32, {2, 3, 4}}, 0);
  g.outputs = {Binary(g, OpCode::kAdd, p, p)};
  GraphLimits at;
  at.max_nodes = 2;
  at.max_rank = 3;
  at.max_elements_per_tensor = 24;
  EXPECT_TRUE(Verify(g, at).ok()) << Verify(g, at).ToString();

  GraphLimits nodes = at;
  nodes.max_nodes = 1;
  ExpectError(g, StatusCode::kResourceExhausted,
              "graph has 2 nodes, over the limit of 1 (max_graph_nodes)", nodes);
  GraphLimits rank = at;
  rank.max_rank = 2;
  ExpectError(g, StatusCode::kResourceExhausted,
              "node 0 'p0' (parameter): rank 3 is over the limit of 2 (max_tensor_rank)", rank);
  GraphLimits elements = at;
  elements.max_elements_per_tensor = 23;
  ExpectError(g, StatusCode::kResourceExhausted,
              "f32[2,3,4] has 24 elements, over the limit of 23 (max_tensor_elements)", elements);

  // A name from the request is cut short in messages, which go into the daemon's log.
  g.nodes[0].name = std::string(100000, 'n');
  ExpectError(g, StatusCode::kResourceExhausted,
              "node 0 '" + std::string(80, 'n') + "...' (parameter): rank 3 is over", rank);
  EXPECT_LT(Verify(g, rank).message().size(), 200u);
  g.nodes[0].name = "p0";

  // Outputs may repeat a node, so their count is bounded too.
  g.outputs = {1, 1};
  EXPECT_TRUE(Verify(g, at).ok()) << Verify(g, at).ToString();
  g.outputs = {1, 1, 1};
  ExpectError(g, StatusCode::kResourceExhausted,
              "graph has 3 outputs, over the limit of 2 (max_graph_nodes)", at);
}

TEST(Verifier, RejectsParameterGapsAndBadAttributes) {
  Graph g;
  int p = Param(g, {DType::kF32, {4}}, 1);
  g.outputs = {p};
  ExpectError(g, StatusCode::kInvalidArgument, "parameter numbers");

  Graph h;
  int x = Param(h, {DType::kF32, {4, 4}}, 0);
  int t = testing::Transpose(h, x, {1, 0});
  h.nodes[t].dimensions = {1, 1};
  h.outputs = {t};
  ExpectError(h, StatusCode::kInvalidArgument, "not a permutation");
}

TEST(Verifier, RejectsTypeRuleViolations) {
  Graph g;
  int p = Param(g, {DType::kS32, {4}}, 0);
  g.outputs = {testing::Unary(g, OpCode::kExp, p)};
  ExpectError(g, StatusCode::kInvalidArgument, "floating-point operand");

  Graph h;
  int f = Param(h, {DType::kF32, {4}}, 0);
  h.outputs = {Binary(h, OpCode::kXor, f, f)};
  ExpectError(h, StatusCode::kInvalidArgument, "integer or pred");
}

TEST(Verifier, MessagesNameTheNode) {
  Graph g;
  int p = Param(g, {DType::kF32, {4}}, 0);
  int q = Param(g, {DType::kF32, {5}}, 1);
  int a = Binary(g, OpCode::kAdd, p, q);
  g.nodes[a].name = "add.42";
  g.outputs = {a};
  Status s = Verify(g);
  EXPECT_NE(s.message().find("node 2 'add.42' (add)"), std::string::npos) << s.ToString();
}

TEST(Verifier, EmptyGraphsAndBadOutputs) {
  Graph g;
  ExpectError(g, StatusCode::kInvalidArgument, "no nodes");
  Param(g, {DType::kF32, {4}}, 0);
  ExpectError(g, StatusCode::kInvalidArgument, "no outputs");
  g.outputs = {3};
  ExpectError(g, StatusCode::kInvalidArgument, "missing node 3");
}

}  // namespace
}  // namespace stitch
