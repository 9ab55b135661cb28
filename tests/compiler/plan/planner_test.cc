#include <gtest/gtest.h>

#include "stitch/ir/aliasing.h"
#include "stitch/ir/graph_proto.h"
#include "stitch/ir/verifier.h"
#include "stitch/plan/baseline_planner.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

TEST(BaselinePlanner, SoftmaxTakesThreeKernels) {
  Graph g = testing::Softmax(4, 32);
  ASSERT_TRUE(Verify(g).ok());
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 3u) << Describe(g, *plan);
  EXPECT_EQ(plan->kernels[0].kind, KernelKind::kRowReduce);
  EXPECT_EQ(plan->kernels[1].kind, KernelKind::kRowReduce);
  EXPECT_EQ(plan->kernels[2].kind, KernelKind::kLoop);
  // The sum kernel reads x and the materialised max; it recomputes exp(x - max) inside.
  EXPECT_EQ(plan->kernels[1].inputs.size(), 2u);
  // The loop kernel reads x, the max and the sum.
  EXPECT_EQ(plan->kernels[2].inputs.size(), 3u);
  EXPECT_EQ(TemporaryNodes(g, *plan).size(), 2u);
}

TEST(BaselinePlanner, ElementwiseChainIsOneLoopKernel) {
  Graph g;
  int x = testing::Param(g, {DType::kF32, {64}}, 0);
  int y = testing::Param(g, {DType::kF32, {64}}, 1);
  int a = testing::Binary(g, OpCode::kAdd, x, y);
  int b = testing::Unary(g, OpCode::kTanh, a);
  int c = testing::Binary(g, OpCode::kMul, b, x);
  g.outputs = {c, a};
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 1u);
  EXPECT_EQ(plan->kernels[0].outputs.size(), 2u);
  EXPECT_EQ(plan->kernels[0].inputs.size(), 2u);
}

TEST(BaselinePlanner, ColumnReductionIsClassified) {
  Graph g;
  int x = testing::Param(g, {DType::kF32, {128, 64}}, 0);
  int r = testing::Reduce(g, x, testing::ConstScalar(g, DType::kF32, 0), {0}, ReduceKind::kSum);
  g.outputs = {r};
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 1u);
  EXPECT_EQ(plan->kernels[0].kind, KernelKind::kColumnReduce);
  EXPECT_FALSE(IsRowReduction(g, r));
}

TEST(BaselinePlanner, TrafficAndLowerBound) {
  Graph g = testing::Softmax(4, 32);
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  TrafficEstimate lb = TrafficLowerBound(g);
  EXPECT_EQ(lb.bytes_read, 4 * 32 * 4);
  EXPECT_EQ(lb.bytes_written, 4 * 32 * 4);
  TrafficEstimate t = EstimateTraffic(g, *plan);
  // x is read by all three kernels, max twice, sum once.
  EXPECT_EQ(t.bytes_read, 3 * 512 + 2 * 16 + 16);
  EXPECT_EQ(t.bytes_written, 16 + 16 + 512);
}

TEST(BaselinePlanner, ParameterOutputsAliasTheirInput) {
  Graph g;
  int x = testing::Param(g, {DType::kF32, {8}}, 0);
  int y = testing::Unary(g, OpCode::kNeg, x);
  g.outputs = {x, y};
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 1u);
  EXPECT_EQ(plan->kernels[0].outputs, std::vector<int>{y});
}

// A reshape of a parameter is the parameter's bytes: no kernel copies it, and the lower
// bound neither writes it nor reads a parameter only it needs.
TEST(BaselinePlanner, ReshapesOfParametersAliasTheirInput) {
  Graph g;
  int x = testing::Param(g, {DType::kF32, {8, 4}}, 0);
  int unused = testing::Param(g, {DType::kF32, {16}}, 1);
  int flat = testing::Reshape(g, testing::Reshape(g, x, {4, 8}), {32});
  int y = testing::Unary(g, OpCode::kNeg, x);
  g.outputs = {flat, y, testing::Reshape(g, unused, {4, 4})};
  EXPECT_EQ(AliasedParameter(g, flat), 0);
  EXPECT_EQ(AliasedParameter(g, g.outputs[2]), 1);
  EXPECT_EQ(AliasedParameter(g, y), -1);
  EXPECT_EQ(ViewedParameterNode(g, flat), x);
  EXPECT_EQ(OutputBufferNode(g, flat), x);
  EXPECT_EQ(OutputBufferNode(g, y), y);
  StatusOr<FusionPlan> plan = PlanBaseline(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernels.size(), 1u);
  EXPECT_EQ(plan->kernels[0].outputs, std::vector<int>{y});
  const TrafficEstimate bound = TrafficLowerBound(g);
  EXPECT_EQ(bound.bytes_read, 8 * 4 * 4);
  EXPECT_EQ(bound.bytes_written, 8 * 4 * 4);
}

// A normalization by a statistic of `dims` over x[rows, cols]: y = x - sum(x), broadcast back.
Graph CenteredBy(int64_t rows, int64_t cols, std::vector<int64_t> dims) {
  Graph g;
  const int x = testing::Param(g, {DType::kF32, {rows, cols}}, 0);
  const int sum =
      testing::Reduce(g, x, testing::ConstScalar(g, DType::kF32, 0), dims, ReduceKind::kSum);
  const int64_t kept = dims == std::vector<int64_t>{0} ? 1 : 0;
  const int back = testing::Broadcast(g, sum, {rows, cols}, {kept});
  g.outputs = {testing::Binary(g, OpCode::kSub, x, back)};
  return g;
}

// A per-column statistic (over the rows, as batch norm's over the batch) is complete only
// once all of x is read, and the output needs x again: all of x past what stays on chip.
TEST(ForcedRereads, AColumnStatisticReadsItsInputAgainPastWhatStaysOnChip) {
  const Graph g = CenteredBy(1024, 64, {0});
  const int64_t x = 1024 * 64 * 4;
  EXPECT_EQ(ForcedRereadBytes(g, 0), x);
  EXPECT_EQ(ForcedRereadBytes(g, x / 4), x - x / 4);
  EXPECT_EQ(ForcedRereadBytes(g, x), 0);
  // A leading dimension of one spans nothing: the rows are the outermost that counts.
  Graph unit;
  const int p = testing::Param(unit, {DType::kF32, {1, 1024, 64}}, 0);
  const int sum = testing::Reduce(unit, p, testing::ConstScalar(unit, DType::kF32, 0), {0, 1},
                                  ReduceKind::kSum);
  const int back = testing::Broadcast(unit, sum, {1, 1024, 64}, {2});
  unit.outputs = {testing::Binary(unit, OpCode::kSub, p, back)};
  EXPECT_EQ(ForcedRereadBytes(unit, 0), x);
}

// A row's statistic is complete once its row is read; a statistic no output combines with
// its input (a bias gradient), or one whose input the output does not read, forces nothing.
TEST(ForcedRereads, RowStatisticsAndUnconsumedOnesForceNone) {
  EXPECT_EQ(ForcedRereadBytes(CenteredBy(1024, 64, {1}), 0), 0);
  Graph bias_grad;
  const int dy = testing::Param(bias_grad, {DType::kF32, {1024, 64}}, 0);
  bias_grad.outputs = {testing::Reduce(
      bias_grad, dy, testing::ConstScalar(bias_grad, DType::kF32, 0), {0}, ReduceKind::kSum)};
  EXPECT_EQ(ForcedRereadBytes(bias_grad, 0), 0);
  Graph other;
  const int a = testing::Param(other, {DType::kF32, {1024, 64}}, 0);
  const int b = testing::Param(other, {DType::kF32, {1024, 64}}, 1);
  const int sum =
      testing::Reduce(other, a, testing::ConstScalar(other, DType::kF32, 0), {0}, ReduceKind::kSum);
  other.outputs = {
      testing::Binary(other, OpCode::kSub, b, testing::Broadcast(other, sum, {1024, 64}, {1}))};
  EXPECT_EQ(ForcedRereadBytes(other, 0), 0);
}

TEST(GraphProto, RoundTripsThroughBinaryAndJson) {
  Graph g = testing::Softmax(4, 32, DType::kF16);
  StatusOr<Graph> binary = ParseGraphBinary(ToBinary(g));
  ASSERT_TRUE(binary.ok()) << binary.status().ToString();
  EXPECT_EQ(ToBinary(*binary), ToBinary(g));
  StatusOr<Graph> json = ParseGraphJson(ToJson(g));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(ToBinary(*json), ToBinary(g));
  EXPECT_TRUE(Verify(*json).ok());
}

TEST(GraphProto, RejectsGarbageAndBadEnums) {
  EXPECT_FALSE(ParseGraphBinary("\xff\xff\xff garbage").ok());
  StatusOr<Graph> bad = ParseGraphJson("{\"nodes\": [{\"op\": \"NOT_AN_OP\"}]}");
  EXPECT_FALSE(bad.ok());
  StatusOr<Graph> unspecified = ParseGraphJson("{\"nodes\": [{\"op\": \"ADD\"}]}");
  ASSERT_FALSE(unspecified.ok());
  EXPECT_NE(unspecified.status().message().find("dtype"), std::string::npos);
}

}  // namespace
}  // namespace stitch
