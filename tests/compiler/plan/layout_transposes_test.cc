// Folding layout transposes: a graph that reads channels-last storage through transposes
// computes in the stored order, with the plan of the graph written for that order; what is
// not a closed group stays as it is; and the folded graph computes what the original does, on
// hand-written graphs and on random graphs from a logged seed (e2e_layout_transposes_test:
// on the emulator).
#include "stitch/plan/layout_transposes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "stitch/ir/verifier.h"
#include "stitch/plan/gpu_device.h"
#include "stitch/plan/statistics_rewrite.h"
#include "stitch/plan/stitch_planner.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"
#include "support/graph_builder.h"
#include "support/normalization_graphs.h"
#include "support/random_graph.h"
#include "support/stored_order.h"

namespace stitch {
namespace {

using namespace stitch::testing;

const Dims kToNhwc = {0, 2, 3, 1};

const GpuDevice& H100() { return *FindDevice("H100"); }

// The elements every live transpose of `g` moves.
int64_t TransposedElements(const Graph& g) {
  const std::vector<bool> live = LiveNodes(g);
  int64_t n = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (live[k] && g.nodes[k].op == OpCode::kTranspose) n += g.nodes[k].shape.elements();
  }
  return n;
}

std::string SeedTrace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)";
}

// `folded` verifies, keeps `g`'s parameters and outputs, and gives `g`'s outputs (by the
// interpreter) on random inputs from `seed`.
::testing::AssertionResult ComputesTheSame(const Graph& g, const Graph& folded, uint64_t seed) {
  if (Status s = Verify(folded); !s.ok()) {
    return ::testing::AssertionFailure() << s.ToString() << "\n" << ToText(folded);
  }
  const std::vector<int> want_params = g.Parameters(), got_params = folded.Parameters();
  if (want_params.size() != got_params.size()) {
    return ::testing::AssertionFailure() << "parameter count differs";
  }
  for (size_t k = 0; k < want_params.size(); ++k) {
    if (folded.nodes[got_params[k]].shape != g.nodes[want_params[k]].shape) {
      return ::testing::AssertionFailure() << "parameter " << k << " changed its shape";
    }
  }
  std::mt19937_64 rng(seed);
  std::vector<Tensor> params;
  for (int p : g.Parameters()) params.push_back(RandomTensor(g.nodes[p].shape, rng));
  const StatusOr<std::vector<Tensor>> want = Evaluate(g, params);
  const StatusOr<std::vector<Tensor>> got = Evaluate(folded, params);
  if (!want.ok() || !got.ok()) return ::testing::AssertionFailure() << "evaluation failed";
  if (want->size() != got->size()) return ::testing::AssertionFailure() << "output count differs";
  for (size_t k = 0; k < want->size(); ++k) {
    const Comparison c = Compare((*want)[k], (*got)[k], OutputTolerance(g, (*want)[k].shape.dtype));
    if (!c.pass) return ::testing::AssertionFailure() << "output " << k << ": " << c.message;
  }
  return ::testing::AssertionSuccess();
}

std::vector<KernelKind> KernelKinds(const Graph& g) {
  StatusOr<FusionPlan> plan = PlanStitched(g, H100());
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<KernelKind> kinds;
  if (plan.ok()) {
    for (const KernelSpec& k : plan->kernels) kinds.push_back(k.kind);
  }
  return kinds;
}

// Batch norm over NCHW read from NHWC storage: the statistics, the per-channel scale and shift
// and the output all move to the stored order, and the plan is the one of batch norm written
// over NHWC (a column reduction, not a row reduction of a transposed tensor).
TEST(FoldLayoutTransposes, BatchNormOverChannelsLastStorageComputesInStoredOrder) {
  for (DType t : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const Graph nchw = BatchNormForward(t, {8, 16, 12, 10}, 1);
    const Graph stored = StoredPermuted(nchw, kNchwOfNhwc);
    const LayoutTransposeFold fold = FoldLayoutTransposes(stored);
    EXPECT_EQ(fold.folded, 1);
    EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 0) << ToText(fold.graph);
    EXPECT_TRUE(ComputesTheSame(stored, fold.graph, 7));
    const Graph nhwc = BatchNormForward(t, {8, 12, 10, 16}, 3);
    EXPECT_EQ(KernelKinds(OnePassStatisticsRewrite(fold.graph)),
              KernelKinds(OnePassStatisticsRewrite(nhwc)));
    EXPECT_NE(KernelKinds(OnePassStatisticsRewrite(stored)),
              KernelKinds(OnePassStatisticsRewrite(nhwc)));
  }
}

// A value per (channel, row), broadcast along NCHW's dimensions 1 and 2, lands on stored
// dimensions 3 and 1, out of order: the broadcast then reads a transpose of that small value,
// not of the tensor.
TEST(FoldLayoutTransposes, ABroadcastOutOfStoredOrderReadsItsSmallOperandTransposed) {
  Graph g;
  const Dims nchw = {2, 6, 4, 5};
  const int x = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 0, "x"), kNchwOfNhwc);
  const int scale = Param(g, {DType::kF32, {6, 4}}, 1, "scale");
  const int y = Binary(g, OpCode::kMul, x, Broadcast(g, scale, nchw, {1, 2}));
  g.outputs = {Transpose(g, Unary(g, OpCode::kExp, y), kToNhwc)};
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  const LayoutTransposeFold fold = FoldLayoutTransposes(g);
  EXPECT_EQ(fold.folded, 1);
  // The only transpose left is the scale's, [6, 4] to [4, 6].
  ASSERT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 1) << ToText(fold.graph);
  for (const Node& n : fold.graph.nodes) {
    if (n.op == OpCode::kTranspose) {
      EXPECT_EQ(n.shape.dims, (Dims{4, 6}));
    }
  }
  EXPECT_TRUE(ComputesTheSame(g, fold.graph, 11));
}

// An output written in a third order keeps one transpose: the two compose.
TEST(FoldLayoutTransposes, TransposesAroundElementwiseOpsComposeIntoOne) {
  Graph g;
  const int x = Transpose(g, Param(g, {DType::kF32, {3, 4, 5}}, 0, "x"), {2, 0, 1});
  const int y = Unary(g, OpCode::kTanh, x);
  g.outputs = {Transpose(g, y, {1, 0, 2})};
  ASSERT_TRUE(Verify(g).ok());
  const LayoutTransposeFold fold = FoldLayoutTransposes(g);
  EXPECT_EQ(fold.folded, 1);
  ASSERT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 1);
  EXPECT_EQ(fold.graph.nodes[fold.graph.outputs[0]].dimensions, (Dims{0, 2, 1}));
  EXPECT_TRUE(ComputesTheSame(g, fold.graph, 3));
}

// An op that joins two paths of a group, of different lengths (SiLU's x / (1 + exp(-x)) after
// batch norm over channels-last storage), is reached from the shorter path before its other
// operand has joined: it waits for it, and the group still closes.
TEST(FoldLayoutTransposes, AnOpJoiningTwoPathsOfTheGroupWaitsForTheLongerOne) {
  Graph g;
  const int x = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 0, "x"), kNchwOfNhwc);
  const int scale = Param(g, {DType::kF32, {6}}, 1, "scale");
  const int y = Binary(g, OpCode::kMul, x, Broadcast(g, scale, {2, 6, 4, 5}, {1}));
  const int one = Broadcast(g, ConstScalar(g, DType::kF32, 1), {2, 6, 4, 5}, {});
  const int e = Unary(g, OpCode::kExp, Unary(g, OpCode::kNeg, y));
  g.outputs = {Transpose(g, Binary(g, OpCode::kDiv, y, Binary(g, OpCode::kAdd, e, one)), kToNhwc)};
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  const LayoutTransposeFold fold = FoldLayoutTransposes(g);
  EXPECT_EQ(fold.folded, 1);
  EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 0) << ToText(fold.graph);
  EXPECT_TRUE(ComputesTheSame(g, fold.graph, 13));
  // The same join where the longer path leaves the group (its value is also an output, read
  // in logical order): the group stays open, and the graph as it was.
  Graph open = g;
  open.outputs.push_back(e);
  const LayoutTransposeFold left = FoldLayoutTransposes(open);
  EXPECT_EQ(left.folded, 0);
  EXPECT_EQ(ToText(left.graph), ToText(open));
}

// Groups that are not closed come back unchanged: folding them would move a full-size
// transpose elsewhere, not remove it.
TEST(FoldLayoutTransposes, LeavesOpenGroupsAlone) {
  std::vector<Graph> graphs;
  auto start = [&](int* x) -> Graph& {
    Graph& g = graphs.emplace_back();
    *x = Transpose(g, Param(g, {DType::kF32, {4, 6, 8}}, 0, "x"), {1, 0, 2});
    return g;
  };
  int x = -1;
  {  // an output in logical order
    Graph& g = start(&x);
    g.outputs = {Unary(g, OpCode::kExp, x)};
  }
  {  // a reduction whose kept dimensions would change order ([6, 4] stored as [4, 6])
    Graph& g = start(&x);
    g.outputs = {Reduce(g, x, ConstScalar(g, DType::kF32, 0), {2}, ReduceKind::kSum)};
  }
  {  // a reshape of a group value
    Graph& g = start(&x);
    g.outputs = {Reshape(g, Unary(g, OpCode::kExp, x), {24, 8})};
  }
  {  // an operand in logical order that is no broadcast: it would need the transpose
    Graph& g = start(&x);
    const int y = Param(g, {DType::kF32, {6, 4, 8}}, 1, "y");
    g.outputs = {Transpose(g, Binary(g, OpCode::kAdd, x, y), {1, 0, 2})};
  }
  {  // a transpose by another permutation into the same op
    Graph& g = start(&x);
    const int y = Transpose(g, Param(g, {DType::kF32, {6, 8, 4}}, 1, "y"), {0, 2, 1});
    g.outputs = {Transpose(g, Binary(g, OpCode::kAdd, x, y), {1, 0, 2})};
  }
  for (size_t k = 0; k < graphs.size(); ++k) {
    SCOPED_TRACE("graph " + std::to_string(k));
    ASSERT_TRUE(Verify(graphs[k]).ok()) << Verify(graphs[k]).ToString();
    const LayoutTransposeFold fold = FoldLayoutTransposes(graphs[k]);
    EXPECT_EQ(fold.folded, 0);
    EXPECT_EQ(ToText(fold.graph), ToText(graphs[k]));
  }
}

// Random graphs (elementwise chains, reductions along every kind of axis, statistics
// broadcast back, several outputs) with their full-rank tensors stored in a random other
// order: the folded graph computes the same outputs, and most fold.
TEST(FoldLayoutTransposes, RandomGraphsInAnotherStoredOrderComputeTheSame) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  int folded = 0, graphs = 0;
  for (int i = 0; i < 80; ++i) {
    const Graph g = RandomGraphBuilder(seed + static_cast<uint64_t>(i), 4096).Build();
    const int rank = g.nodes[g.Parameters()[0]].shape.rank();
    if (rank < 2) continue;
    Dims perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    while (std::is_sorted(perm.begin(), perm.end())) std::shuffle(perm.begin(), perm.end(), rng);
    const Graph stored = StoredPermuted(g, perm);
    SCOPED_TRACE("graph " + std::to_string(i) + "\n" + ToText(stored));
    ASSERT_TRUE(Verify(stored).ok()) << Verify(stored).ToString();
    const LayoutTransposeFold fold = FoldLayoutTransposes(stored);
    ++graphs;
    folded += fold.folded > 0;
    if (fold.folded == 0) {
      EXPECT_EQ(ToText(fold.graph), ToText(stored));
      continue;
    }
    EXPECT_LT(TransposedElements(fold.graph), TransposedElements(stored)) << ToText(fold.graph);
    EXPECT_TRUE(ComputesTheSame(stored, fold.graph, seed + static_cast<uint64_t>(i)));
  }
  ASSERT_GT(graphs, 0);
  EXPECT_GT(folded, 0) << "of " << graphs;
}

}  // namespace
}  // namespace stitch
