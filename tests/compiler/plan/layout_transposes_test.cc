// Folding layout transposes: a graph that reads channels-last storage through transposes
// computes in the stored order, with the plan of the graph written for that order, also
// through reshapes of the storage (GroupNorm's view into groups); what is not a closed group
// stays as it is; and the folded graph computes what the original does, on hand-written
// graphs and on random graphs and reshapes from a logged seed (e2e_layout_transposes_test:
// on the emulator).
#include "stitch/plan/layout_transposes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
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

// The offsets in x's storage of the elements of reshape(transpose(x, perm), ...), in order:
// the logical tensor's elements in row-major order.
std::vector<int64_t> StorageOffsets(const Dims& stored, const Dims& perm) {
  Dims strides(stored.size(), 1);
  for (size_t d = stored.size(); d-- > 1;) strides[d - 1] = strides[d] * stored[d];
  const int64_t elements =
      std::accumulate(stored.begin(), stored.end(), int64_t{1}, std::multiplies<int64_t>());
  std::vector<int64_t> offsets;
  for (int64_t k = 0; k < elements; ++k) {
    int64_t rest = k, offset = 0;
    for (size_t i = perm.size(); i-- > 0;) {
      offset += rest % stored[perm[i]] * strides[perm[i]];
      rest /= stored[perm[i]];
    }
    offsets.push_back(offset);
  }
  return offsets;
}

// Whether some transpose(reshape(x, shape), q) of result shape `result` reads x's storage at
// `offsets`, tried over every q.
bool IsATransposedReshapeOfStorage(const std::vector<int64_t>& offsets, const Dims& result) {
  Dims q(result.size());
  std::iota(q.begin(), q.end(), 0);
  do {
    Dims shape(result.size()), strides(result.size(), 1);
    for (size_t j = 0; j < result.size(); ++j) shape[q[j]] = result[j];
    for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    bool same = true;
    for (size_t k = 0; same && k < offsets.size(); ++k) {
      int64_t rest = static_cast<int64_t>(k), offset = 0;
      for (size_t j = result.size(); j-- > 0;) {
        offset += rest % result[j] * strides[q[j]];
        rest /= result[j];
      }
      same = offset == offsets[k];
    }
    if (same) return true;
  } while (std::next_permutation(q.begin(), q.end()));
  return false;
}

// A random reshape of `dims`: neighbours merged, dimensions split in two, ones inserted.
Dims RandomReshape(const Dims& dims, std::mt19937_64& rng) {
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  Dims out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (chance(15)) out.push_back(1);
    int64_t d = dims[i];
    while (i + 1 < dims.size() && chance(35)) d *= dims[++i];
    int64_t factor = 1;
    for (int64_t f = 2; f < d; ++f) {
      if (d % f == 0 && chance(50)) {
        factor = f;
        break;
      }
    }
    if (factor > 1) out.push_back(factor);
    out.push_back(d / factor);
  }
  return out;
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
// operand has joined: the longer path joins from above, and the group still closes.
TEST(FoldLayoutTransposes, AnOpJoiningTwoPathsOfTheGroupTakesTheLongerOneFromAbove) {
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

// An op of the group whose other operand is computed from another transpose by the same
// permutation, which nothing in the group reads otherwise (GroupNorm's backward adds the
// normalized gradient to a product of the stored input): that operand joins from above,
// with its transpose as a second root.
TEST(FoldLayoutTransposes, AnOperandFromAnotherStoredTensorJoinsFromAbove) {
  Graph g;
  const Dims nchw = {2, 6, 4, 5};
  const int x = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 0, "x"), kNchwOfNhwc);
  const int dy = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 1, "dy"), kNchwOfNhwc);
  const int scale = Param(g, {DType::kF32, {6}}, 2, "scale");
  const int scaled = Binary(g, OpCode::kMul, dy, Broadcast(g, scale, nchw, {1}));
  const int sum = Binary(g, OpCode::kAdd, Unary(g, OpCode::kExp, x), scaled);
  g.outputs = {Transpose(g, sum, kToNhwc)};
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  const LayoutTransposeFold fold = FoldLayoutTransposes(g);
  EXPECT_EQ(fold.folded, 2);
  EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 0) << ToText(fold.graph);
  EXPECT_TRUE(ComputesTheSame(g, fold.graph, 19));
}

// A ResNet block's batch norm backward over channels-last storage: the input and the ReLU's
// mask come transposed from NHWC storage, the gradient row-major, and the result goes back to
// NHWC. The gradient is read transposed into stored order instead, one transpose for the
// three the fold removes, and everything else computes in NHWC.
TEST(FoldLayoutTransposes, AnOperandInLogicalOrderIsTransposedWhereTheFoldRemovesMore) {
  Graph g;
  const Dims nchw = {2, 6, 4, 5};
  const int x = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 0, "x"), kNchwOfNhwc);
  const int mask = Transpose(g, Param(g, {DType::kPred, {2, 4, 5, 6}}, 1, "mask"), kNchwOfNhwc);
  const int dy = Param(g, {DType::kF32, nchw}, 2, "dy");
  const int zero = Broadcast(g, ConstScalar(g, DType::kF32, 0), nchw, {});
  const int grad = Select(g, mask, dy, zero);
  const int sum = Reduce(g, Binary(g, OpCode::kMul, grad, x), ConstScalar(g, DType::kF32, 0),
                         {0, 2, 3}, ReduceKind::kSum);
  const int scaled = Binary(g, OpCode::kMul, x, Broadcast(g, sum, nchw, {1}));
  g.outputs = {sum, Transpose(g, Binary(g, OpCode::kSub, grad, scaled), kToNhwc)};
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  const LayoutTransposeFold fold = FoldLayoutTransposes(g);
  EXPECT_EQ(fold.folded, 2);
  EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 1) << ToText(fold.graph);
  EXPECT_LT(TransposedElements(fold.graph), TransposedElements(g));
  EXPECT_TRUE(ComputesTheSame(g, fold.graph, 23));
}

// An operand that would join from above through a long chain of ops (a thousand negations
// of a broadcast): the search stops at a bounded depth and reads the chain's end transposed
// into stored order (one transpose for the two the fold removes), where a chain from another
// stored tensor joins from below, however long.
TEST(FoldLayoutTransposes, ALongChainJoinsFromBelowNotFromAbove) {
  const Dims nchw = {2, 6, 4, 5};
  auto chain = [](Graph& g, int x, int length) {
    for (int k = 0; k < length; ++k) x = Unary(g, OpCode::kNeg, x);
    return x;
  };
  {
    Graph g;
    const int x = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 0, "x"), kNchwOfNhwc);
    const int scale = Param(g, {DType::kF32, {6}}, 1, "scale");
    const int above = chain(g, Broadcast(g, scale, nchw, {1}), 1000);
    g.outputs = {Transpose(g, Binary(g, OpCode::kAdd, Unary(g, OpCode::kExp, x), above), kToNhwc)};
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
    const LayoutTransposeFold fold = FoldLayoutTransposes(g);
    EXPECT_EQ(fold.folded, 1);
    EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 1);
    EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kNeg), 1000);
    EXPECT_TRUE(ComputesTheSame(g, fold.graph, 29));
  }
  {
    Graph g;
    const int x = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 0, "x"), kNchwOfNhwc);
    const int y = Transpose(g, Param(g, {DType::kF32, {2, 4, 5, 6}}, 1, "y"), kNchwOfNhwc);
    const int below = chain(g, y, 1000);
    g.outputs = {Transpose(g, Binary(g, OpCode::kAdd, Unary(g, OpCode::kExp, x), below), kToNhwc)};
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
    const LayoutTransposeFold fold = FoldLayoutTransposes(g);
    EXPECT_EQ(fold.folded, 2);
    EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 0);
    EXPECT_TRUE(ComputesTheSame(g, fold.graph, 23));
  }
}

// GroupNorm + swish over NCHW read from NHWC storage: its view into groups ([N, C, H, W] to
// [N, G, C/G, H, W]) and the view back are reshapes of the storage ([N, H, W, G, C/G] and
// [N, H, W, C]), each left as a transpose of the reshaped storage that the next round folds,
// until no transpose is left.
TEST(FoldLayoutTransposes, GroupNormOverChannelsLastStorageFoldsThroughItsViews) {
  for (DType t : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const Graph nchw = GroupNormSwish(t, 2, 320, 64, 64, 32);
    const Graph stored = StoredPermuted(nchw, kNchwOfNhwc);
    const LayoutTransposeFold fold = FoldLayoutTransposes(stored);
    EXPECT_GE(fold.folded, 3);  // the input's transpose and one per view
    EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose), 0) << ToText(fold.graph);
    EXPECT_TRUE(ComputesTheSame(stored, fold.graph, 17));
    // One kernel, as over row-major storage (a global stitch: a group's elements are not one
    // row of the stored tensor); the unfolded graph transposes the tensor in a kernel of its
    // own first.
    const size_t row_major = KernelKinds(OnePassStatisticsRewrite(nchw)).size();
    EXPECT_EQ(KernelKinds(OnePassStatisticsRewrite(fold.graph)).size(), row_major);
    EXPECT_GT(KernelKinds(OnePassStatisticsRewrite(stored)).size(), row_major);
  }
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
  {  // an operand in logical order that is no broadcast and no exit to cancel: it would
     // need a transpose of its own for the one the fold removes
    Graph& g = start(&x);
    const int y = Param(g, {DType::kF32, {6, 4, 8}}, 1, "y");
    g.outputs = {Reduce(g, Binary(g, OpCode::kAdd, x, y), ConstScalar(g, DType::kF32, 0), {2},
                        ReduceKind::kSum)};
  }
  {  // two operands in logical order for one root and one exit the fold would remove
    Graph& g = start(&x);
    const int y = Param(g, {DType::kF32, {6, 4, 8}}, 1, "y");
    const int z = Param(g, {DType::kF32, {6, 4, 8}}, 2, "z");
    g.outputs = {
        Transpose(g, Binary(g, OpCode::kAdd, Binary(g, OpCode::kMul, x, y), z), {1, 0, 2})};
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

// Random tensors stored in a random order, reshaped at random after an elementwise op and
// reduced whole: the fold removes every transpose exactly when the reshape is, by brute
// force over every permutation, a transpose of a reshape of the storage; and the folded
// graph computes the same.
TEST(FoldLayoutTransposes, RandomReshapesFoldExactlyWhenTheyReshapeTheStorage) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> sizes = {1, 2, 3, 4, 6};
  int through = 0, kept = 0;
  for (int i = 0; i < 300; ++i) {
    Dims stored(2 + rng() % 3);
    for (int64_t& d : stored) d = sizes[rng() % sizes.size()];
    Dims perm(stored.size());
    std::iota(perm.begin(), perm.end(), 0);
    while (std::is_sorted(perm.begin(), perm.end())) std::shuffle(perm.begin(), perm.end(), rng);
    Dims logical;
    for (int64_t p : perm) logical.push_back(stored[p]);
    Dims result;
    do {  // at most rank 6: the brute force tries every permutation of the result
      result = RandomReshape(logical, rng);
    } while (result.size() > 6);
    Graph g;
    const int x = Transpose(g, Param(g, {DType::kF32, stored}, 0, "x"), perm);
    const int r = Reshape(g, Unary(g, OpCode::kExp, x), result);
    Dims all(result.size());
    std::iota(all.begin(), all.end(), 0);
    g.outputs = {Reduce(g, Unary(g, OpCode::kTanh, r), ConstScalar(g, DType::kF32, 0), all,
                        ReduceKind::kSum)};
    SCOPED_TRACE("graph " + std::to_string(i) + "\n" + ToText(g));
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
    const LayoutTransposeFold fold = FoldLayoutTransposes(g);
    const bool of_storage = IsATransposedReshapeOfStorage(StorageOffsets(stored, perm), result);
    EXPECT_EQ(CountLiveOps(fold.graph, OpCode::kTranspose) == 0, of_storage) << ToText(fold.graph);
    EXPECT_TRUE(ComputesTheSame(g, fold.graph, seed + static_cast<uint64_t>(i)));
    (of_storage ? through : kept) += 1;
  }
  EXPECT_GT(through, 0);
  EXPECT_GT(kept, 0);
}

}  // namespace
}  // namespace stitch
