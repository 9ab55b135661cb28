// The reduction rewrites of the baseline models: XLA's tree split and reduction splitter and
// Inductor's split reductions follow their compilers' rules, and every rewritten graph computes
// what the original does.
#include "stitch/plan/reduction_rewrites.h"

#include <gtest/gtest.h>

#include <random>

#include "stitch/ir/verifier.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"
#include "support/graph_builder.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

using namespace stitch::testing;

int CountOps(const Graph& g, OpCode op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

// A graph with one reduce of a [dims] parameter over `reduced`.
Graph OneReduce(DType t, std::vector<int64_t> dims, std::vector<int64_t> reduced, ReduceKind kind) {
  Graph g;
  const int x = Param(g, {t, std::move(dims)}, 0);
  const int init = ConstScalar(g, t, kind == ReduceKind::kMax ? -1e30 : 0);
  Output(g, Reduce(g, x, init, std::move(reduced), kind));
  return g;
}

// Checks that `rewritten` verifies and gives `g`'s outputs on random inputs from `rng`.
void ExpectSameValues(const Graph& g, const Graph& rewritten, std::mt19937_64& rng) {
  ASSERT_TRUE(Verify(rewritten).ok()) << Verify(rewritten).ToString() << "\n" << ToText(rewritten);
  std::vector<Tensor> params;
  for (int p : g.Parameters()) params.push_back(RandomTensor(g.nodes[p].shape, rng));
  StatusOr<std::vector<Tensor>> want = Evaluate(g, params);
  StatusOr<std::vector<Tensor>> got = Evaluate(rewritten, params);
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(want->size(), got->size());
  for (size_t k = 0; k < want->size(); ++k) {
    const Comparison c = Compare((*want)[k], (*got)[k], OutputTolerance(g, (*want)[k].shape.dtype));
    EXPECT_TRUE(c.pass) << c.message;
    EXPECT_EQ((*got)[k].shape, (*want)[k].shape);
  }
}

TEST(XlaTreeSplit, FollowsXlasFactorRule) {
  // 2^15: the power of two nearest below sqrt divides it.
  EXPECT_EQ(XlaTreeSplit(32768, kXlaRowReductionBound), std::make_pair(int64_t{256}, int64_t{128}));
  // ResNet-50 batch norm: N*H*W = 100,352 = 2^11 * 49; several factors in (158, 316] divide
  // it, and the power of two wins.
  EXPECT_EQ(XlaTreeSplit(100352, kXlaColumnReductionBound),
            std::make_pair(int64_t{392}, int64_t{256}));
  // A prime pads: 16411 -> k2 = 128 (floor(sqrt) = 128) leaves the least padding.
  const auto [k1, k2] = XlaTreeSplit(16411, kXlaRowReductionBound);
  EXPECT_GE(k1 * k2, 16411);
}

TEST(XlaTreeSplit, CoversTheExtentWithinTheCapOnRandomSizes) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)");
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 500; ++i) {
    const int64_t n = std::uniform_int_distribution<int64_t>(2, int64_t{1} << 30)(rng);
    const auto [k1, k2] = XlaTreeSplit(n, kXlaRowReductionBound);
    ASSERT_GE(k1 * k2, n) << n;
    ASSERT_LE(k2, kXlaRowReductionBound) << n;
    ASSERT_LT(k1 * k2 - n, k2) << n;  // never a whole spare row of k2
  }
}

TEST(XlaReductionRewrites, ReductionsWithinTheBoundsStayOneReduce) {
  const Graph row = OneReduce(DType::kF32, {4, kXlaRowReductionBound}, {1}, ReduceKind::kSum);
  EXPECT_EQ(CountOps(XlaReductionRewrites(row), OpCode::kReduce), 1);
  const Graph column = OneReduce(DType::kF32, {kXlaColumnReductionBound, 3}, {0}, ReduceKind::kSum);
  EXPECT_EQ(CountOps(XlaReductionRewrites(column), OpCode::kReduce), 1);
}

TEST(XlaReductionRewrites, LongReductionsBecomeTwoReducesThatComputeTheSame) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)");
  std::mt19937_64 rng(seed);
  const DType types[] = {DType::kF32, DType::kS32, DType::kF16, DType::kBF16};
  const ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kMax};
  for (int i = 0; i < 12; ++i) {
    const bool row = i % 2 == 0;
    const DType t = types[(i / 2) % 4];
    const ReduceKind kind = kinds[(i / 8) % 2];
    const int64_t bound = row ? kXlaRowReductionBound : kXlaColumnReductionBound;
    const int64_t n = bound + std::uniform_int_distribution<int64_t>(1, bound)(rng);
    const int64_t kept = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    // The reduced extent is split over two dimensions, as a model's [N, H*W] would be.
    const int64_t a = n % 2 == 0 ? 2 : 1;
    Graph g = row ? OneReduce(t, {kept, a, n / a}, {1, 2}, kind)
                  : OneReduce(t, {a, n / a, kept}, {0, 1}, kind);
    SCOPED_TRACE(ToText(g));
    const Graph rewritten = XlaReductionRewrites(g);
    EXPECT_EQ(CountOps(rewritten, OpCode::kReduce), 2);
    const auto [k1, k2] = XlaTreeSplit(n, bound);
    EXPECT_EQ(CountOps(rewritten, OpCode::kPad), k1 * k2 > n ? 1 : 0);
    ExpectSameValues(g, rewritten, rng);
  }
}

// A split reduction's second reduce writes the output in the original's dims: anything after
// it (a reshape back from the flattened kept dimensions) would be a kernel of its own in the
// baseline plans, where XLA and Inductor write the output from the second stage.
TEST(ReductionRewrites, TheSecondReduceWritesTheOutput) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)");
  std::mt19937_64 rng(seed);
  constexpr int kSms = 4;
  const Graph cases[] = {
      OneReduce(DType::kF32, {2, 3, 20011}, {2}, ReduceKind::kSum),  // row, kept [2, 3]
      OneReduce(DType::kF32, {5003, 3, 2}, {0}, ReduceKind::kMax),   // column, kept [3, 2]
      OneReduce(DType::kF32, {20011}, {0}, ReduceKind::kSum),        // to a scalar
      OneReduce(DType::kF16, {2, 4099, 3}, {0, 1}, ReduceKind::kSum),
  };
  for (const Graph& g : cases) {
    SCOPED_TRACE(ToText(g));
    for (const Graph& rewritten : {XlaReductionRewrites(g), InductorSplitReductions(g, kSms)}) {
      EXPECT_EQ(CountOps(rewritten, OpCode::kReduce), 2) << ToText(rewritten);
      const Node& out = rewritten.nodes[rewritten.outputs[0]];
      EXPECT_EQ(out.op, OpCode::kReduce) << ToText(rewritten);
      EXPECT_EQ(out.shape, g.nodes[g.outputs[0]].shape);
      ExpectSameValues(g, rewritten, rng);
    }
  }
}

// The reduce nodes of `g`, each as {input dims, reduced dims}, in node order.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> Reduces(const Graph& g) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
  for (const Node& n : g.nodes) {
    if (n.op == OpCode::kReduce) out.push_back({g.nodes[n.operands[0]].shape.dims, n.dimensions});
  }
  return out;
}

TEST(XlaReductionRewrites, SplitsNonContiguousReductionsLargestRunFirst) {
  // ResNet-50 NCHW batch-norm statistics: H*W (12,544) before N (256), as reduction_splitter.cc
  // does; neither step exceeds XLA's bounds.
  const Graph nchw = OneReduce(DType::kF32, {256, 64, 112, 112}, {0, 2, 3}, ReduceKind::kSum);
  const Graph rewritten = XlaReductionRewrites(nchw);
  ASSERT_TRUE(Verify(rewritten).ok()) << Verify(rewritten).ToString();
  using Step = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  EXPECT_EQ(Reduces(rewritten),
            (std::vector<Step>{{{256, 64, 112, 112}, {2, 3}}, {{256, 64}, {0}}}));
  // A larger leading run goes first, and what it leaves is renumbered.
  const Graph lead = OneReduce(DType::kF32, {64, 32, 5, 3}, {0, 1, 3}, ReduceKind::kSum);
  EXPECT_EQ(Reduces(XlaReductionRewrites(lead)),
            (std::vector<Step>{{{64, 32, 5, 3}, {0, 1}}, {{5, 3}, {1}}}));
}

TEST(XlaReductionRewrites, SplitReductionsComputeTheSame) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)");
  std::mt19937_64 rng(seed);
  // Odd sizes, a run long enough to be tree-split afterwards, and f16 and max reductions.
  const Graph cases[] = {
      OneReduce(DType::kF32, {3, 5, 7, 9}, {0, 2, 3}, ReduceKind::kSum),
      OneReduce(DType::kF16, {2, 3, 130, 131}, {0, 2, 3}, ReduceKind::kSum),
      OneReduce(DType::kF32, {5, 4, 3}, {0, 2}, ReduceKind::kMax),
  };
  for (const Graph& g : cases) {
    SCOPED_TRACE(ToText(g));
    const Graph rewritten = XlaReductionRewrites(g);
    EXPECT_GE(CountOps(rewritten, OpCode::kReduce), 2);
    ExpectSameValues(g, rewritten, rng);
  }
}

// Every rewrite keeps every generated graph valid and its values unchanged: middle-dimension
// reductions, scalars and all the shapes the generator makes, not just the suite's patterns.
TEST(ReductionRewrites, RandomGraphsComputeTheSame) {
  const uint64_t base = RandomGraphBaseSeed();
  SCOPED_TRACE("base seed " + std::to_string(base) + " (STITCH_RANDOM_GRAPH_SEED replays it)");
  std::mt19937_64 rng(base);
  constexpr int kSms = 4;  // small thresholds, so that Inductor splits small graphs too
  for (int i = 0; i < 60; ++i) {
    const Graph g = RandomGraphBuilder(base + static_cast<uint64_t>(i), 4096).Build();
    SCOPED_TRACE("seed " + std::to_string(base + static_cast<uint64_t>(i)) + "\n" + ToText(g));
    ExpectSameValues(g, XlaReductionRewrites(g), rng);
    ExpectSameValues(g, InductorSplitReductions(g, kSms), rng);
  }
}

TEST(XlaReductionRewrites, OneMiddleRunIsABatchedColumnReductionLeftAlone) {
  const Graph middle = OneReduce(DType::kF32, {3, 5000, 7}, {1}, ReduceKind::kSum);
  EXPECT_EQ(Reduces(XlaReductionRewrites(middle)), Reduces(middle));
  const Graph scalar = OneReduce(DType::kF32, {}, {}, ReduceKind::kSum);
  EXPECT_EQ(Reduces(XlaReductionRewrites(scalar)), Reduces(scalar));
}

// Found by GraphMutation.NeverCrashesVerifierOrCompiler: a reduce over no dimensions read the
// last reduced dimension of an empty list.
TEST(InductorSplitReductions, AReduceOverNoDimensionsIsLeftAlone) {
  std::mt19937_64 rng(3);
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, {4096, 64}}) {
    const Graph g = OneReduce(DType::kF32, dims, {}, ReduceKind::kSum);
    const Graph rewritten = InductorSplitReductions(g, 132);
    EXPECT_EQ(Reduces(rewritten), Reduces(g));
    ExpectSameValues(g, rewritten, rng);
  }
}

TEST(InductorSplitFactor, FollowsInductorsRulesOnAnH100) {
  constexpr int kSms = 132;
  // Enough outputs, or short rows: no split.
  EXPECT_EQ(InductorSplitFactor(264, 1 << 20, /*inner=*/true, kSms), 1);
  EXPECT_EQ(InductorSplitFactor(8, 8192, /*inner=*/true, kSms), 1);
  EXPECT_EQ(InductorSplitFactor(8448, 100352, /*inner=*/false, kSms), 1);
  EXPECT_EQ(InductorSplitFactor(64, 32, /*inner=*/false, kSms), 1);
  // BASELINE_SOURCES.md 3.5: NCHW batch norm, C = 64 and N*H*W = 100,352 -> 13 chunks.
  EXPECT_EQ(InductorSplitFactor(64, 100352, /*inner=*/true, kSms), 13);
  // 3.4: NHWC batch norm, C = 64, r = 100,352 -> 784 partial rows.
  EXPECT_EQ(InductorSplitFactor(64, 100352, /*inner=*/false, kSms), 784);
  // Past 512 x SMs x 2048 elements, chunks of 512 x 256 (inner) or 2048 (outer).
  EXPECT_EQ(InductorSplitFactor(1, int64_t{1} << 30, /*inner=*/true, kSms), 8192);
  EXPECT_EQ(InductorSplitFactor(64, int64_t{1} << 22, /*inner=*/false, kSms), 2048);
}

TEST(InductorSplitReductions, SplitsFewOutputReductionsIntoTwoThatComputeTheSame) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)");
  std::mt19937_64 rng(seed);
  constexpr int kSms = 4;  // small thresholds keep the tensors small
  const Graph cases[] = {
      OneReduce(DType::kF32, {3, 10007}, {1}, ReduceKind::kSum),            // inner, prime
      OneReduce(DType::kF32, {999, 5}, {0}, ReduceKind::kSum),              // outer
      OneReduce(DType::kF16, {3, 5, 61, 47}, {0, 2, 3}, ReduceKind::kSum),  // NCHW-like
      OneReduce(DType::kF32, {2, 9001}, {1}, ReduceKind::kMax),
  };
  for (const Graph& g : cases) {
    SCOPED_TRACE(ToText(g));
    const Graph rewritten = InductorSplitReductions(g, kSms);
    EXPECT_EQ(CountOps(rewritten, OpCode::kReduce), 2);
    ExpectSameValues(g, rewritten, rng);
  }
  // Many outputs: left alone.
  const Graph wide = OneReduce(DType::kF32, {64, 9000}, {1}, ReduceKind::kSum);
  EXPECT_EQ(InductorSplitReductions(wide, kSms).nodes.size(), wide.nodes.size());
}

}  // namespace
}  // namespace stitch
