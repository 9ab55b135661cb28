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
  ExpectError(g, StatusCode::kResourceExhausted, "over the limit of 50", limits);

  GraphLimits small;
  small.max_elements_per_tensor = 4;
  ExpectError(g, StatusCode::kResourceExhausted, "exceeds the limit", small);
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
