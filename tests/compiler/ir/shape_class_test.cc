#include "stitch/ir/shape_class.h"

#include <gtest/gtest.h>

#include <random>

#include "stitch/ir/graph_proto.h"
#include "stitch/ir/key.h"
#include "stitch/ir/verifier.h"
#include "support/graph_builder.h"
#include "support/shape_class_graphs.h"

namespace stitch {
namespace {

using namespace testing;  // the graph builders

KeyContext Ctx() { return KeyContext{"sm_90", "v-test", "opts", "salt"}; }

int NodeNamed(const Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

TEST(Bucket, PowersOfTwoHoldEveryExtentOnce) {
  EXPECT_EQ(BucketOf(1).lo, 1);
  EXPECT_EQ(BucketOf(1).hi, 1);
  EXPECT_EQ(BucketOf(2).lo, 2);
  EXPECT_EQ(BucketOf(2).hi, 2);
  EXPECT_EQ(BucketOf(3).lo, 3);
  EXPECT_EQ(BucketOf(4).hi, 4);
  EXPECT_EQ(BucketOf(5).lo, 5);
  EXPECT_EQ(BucketOf(8).lo, 5);
  EXPECT_EQ(BucketOf(1000).lo, 513);
  EXPECT_EQ(BucketOf(1000).hi, 1024);
  const uint64_t seed = std::random_device{}();
  std::printf("bucket property: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 1000; ++i) {
    const int64_t e = 1 + static_cast<int64_t>(rng() % (int64_t{1} << 40));
    const Bucket b = BucketOf(e);
    EXPECT_LE(b.lo, e);
    EXPECT_GE(b.hi, e);
    EXPECT_EQ(b.hi & (b.hi - 1), 0) << e;
    EXPECT_EQ(b.lo, b.hi / 2 + 1) << e;
    // The bucket of each end is the same bucket.
    EXPECT_EQ(BucketOf(b.lo).hi, b.hi);
    EXPECT_EQ(BucketOf(b.hi).lo, b.lo);
  }
}

TEST(ClassifyShapes, FactorsFollowTheExtentThroughTheBlock) {
  const Graph g = TokenBlock(37, 64);
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  StatusOr<ShapeClass> c = ClassifyShapes(g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->extent, 37);
  EXPECT_EQ(c->factor[NodeNamed(g, "x")], 1);
  EXPECT_EQ(c->factor[NodeNamed(g, "residual")], 1);
  EXPECT_EQ(c->factor[NodeNamed(g, "gamma")], 0);
  EXPECT_TRUE(c->Varies(g.outputs[0]));
  EXPECT_FALSE(c->Varies(g.outputs[1])) << "the sum over the rows has a fixed size";
  EXPECT_TRUE(c->Varies(g.outputs[2])) << "one mean per row";
  // The broadcast of gamma to [tokens, hidden] joined the rows it meets.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op == OpCode::kBroadcast && g.nodes[i].shape.rank() == 2) {
      EXPECT_TRUE(c->Varies(static_cast<int>(i))) << ToText(g);
    }
  }
}

// A subgraph cut from a program whose batch is known names the parameters that carry it,
// and no parameter whose dimension 0 only happens to be another size.
TEST(ParametersWithOuterExtent, NamesTheParametersWhoseDimensionZeroIsTheExtent) {
  Graph g = TokenBlock(37, 64);
  g.outer_parameters.clear();
  EXPECT_EQ(ParametersWithOuterExtent(g, 37), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(ParametersWithOuterExtent(g, 64), (std::vector<int64_t>{1, 2}))
      << "gamma and beta are [64]: named, and ClassifyShapes then decides";
  EXPECT_TRUE(ParametersWithOuterExtent(g, 5).empty());
  g.outer_parameters = ParametersWithOuterExtent(g, 37);
  EXPECT_TRUE(ClassifyShapes(g).ok());
}

TEST(ClassifyShapes, ReshapesThatKeepTheExtentOutermostScaleIt) {
  const Graph g = FoldedSoftmax(5, 12, 16);
  StatusOr<ShapeClass> c = ClassifyShapes(g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->extent, 5);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op == OpCode::kReshape && g.nodes[i].shape.rank() == 2) {
      EXPECT_EQ(c->factor[i], 12) << "[batch x sequence, hidden] rows";
    }
  }
}

TEST(ClassifyShapes, AtEveryExtentTheGraphVerifiesAndKeepsItsShapeClass) {
  for (const Graph& g : {TokenBlock(37, 64), FoldedSoftmax(5, 12, 16)}) {
    StatusOr<ShapeClass> c = ClassifyShapes(g);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (int64_t e : {1, 2, 3, 64, 65, 1000}) {
      const Graph at = AtExtent(g, *c, e);
      ASSERT_TRUE(Verify(at).ok()) << g.name << " at " << e << ": " << Verify(at).ToString();
      StatusOr<ShapeClass> again = ClassifyShapes(at);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_EQ(again->extent, e);
      EXPECT_EQ(again->factor, c->factor);
    }
  }
}

TEST(ToShapeClass, OneKeyPerBucketAndAnotherAcrossBuckets) {
  StatusOr<ShapeClass> c = ClassifyShapes(TokenBlock(37, 64));
  ASSERT_TRUE(c.ok());
  auto key_at = [&](int64_t e, Bucket* served) {
    return ComputeKey(ToShapeClass(TokenBlock(e, 64), served), Ctx()).hex;
  };
  Bucket served;
  const std::string k33 = key_at(33, &served);
  EXPECT_EQ(served.lo, 33);
  EXPECT_EQ(served.hi, 64);
  for (int64_t e : {34, 37, 50, 63, 64}) EXPECT_EQ(key_at(e, &served), k33) << e;
  EXPECT_NE(key_at(32, &served), k33);
  EXPECT_NE(key_at(65, &served), k33);
  // The generic key is not the exact key of the top's graph.
  Graph exact = TokenBlock(64, 64);
  exact.outer_parameters.clear();
  EXPECT_NE(ComputeKey(exact, Ctx()).hex, k33);
}

TEST(ToShapeClass, AGraphThatIsNotGenericCompilesItsExactShapes) {
  Graph g = TokenBlock(40, 64);
  // A transpose moves the varying rows inward.
  const int t = Transpose(g, g.outputs[0], {1, 0});
  g.outputs.push_back(t);
  ASSERT_TRUE(Verify(g).ok());
  Bucket served;
  Status why;
  const Graph exact = ToShapeClass(g, &served, &why);
  EXPECT_TRUE(exact.outer_parameters.empty());
  EXPECT_EQ(served.lo, 40);
  EXPECT_EQ(served.hi, 40);
  EXPECT_NE(why.message().find("moves dimension 0"), std::string::npos) << why.ToString();
  Graph plain = g;
  plain.outer_parameters.clear();
  EXPECT_EQ(ComputeKey(exact, Ctx()).hex, ComputeKey(plain, Ctx()).hex);
}

// Returns the classification error of `g` with parameter 0 varying.
std::string WhyNotGeneric(Graph g) {
  g.outer_parameters = {0};
  EXPECT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  StatusOr<ShapeClass> c = ClassifyShapes(g);
  EXPECT_FALSE(c.ok()) << ToText(g);
  return c.ok() ? "" : c.status().message();
}

TEST(ClassifyShapes, OpsThatMoveOrCutTheVaryingDimensionAreNamed) {
  {
    Graph g;
    const int x = Param(g, {DType::kF32, {8, 4}}, 0, "x");
    Output(g, Reduce(g, x, ConstScalar(g, DType::kF32, 0), {0, 1}, ReduceKind::kSum));
    EXPECT_NE(WhyNotGeneric(g).find("reduces dimension 0 into rows of varying length"),
              std::string::npos);
  }
  {
    Graph g;
    const int x = Param(g, {DType::kF32, {8, 4}}, 0, "x");
    Output(g, Concat(g, {x, x}, 0));
    EXPECT_NE(WhyNotGeneric(g).find("concatenates along dimension 0"), std::string::npos);
  }
  {
    Graph g;
    const int x = Param(g, {DType::kF32, {8, 128}}, 0, "x");
    Output(g, Reshape(g, x, {128, 8}));
    EXPECT_NE(WhyNotGeneric(g).find("does not keep dimension 0 outermost"), std::string::npos);
  }
  {
    Graph g;
    const int x = Param(g, {DType::kF32, {8, 4}}, 0, "x");
    Output(g, Reverse(g, x, {0}));
    EXPECT_NE(WhyNotGeneric(g).find("reverses dimension 0"), std::string::npos);
  }
  {
    Graph g;
    const int x = Param(g, {DType::kF32, {2, 2}}, 0, "x");
    Output(g, Binary(g, OpCode::kAdd, x, ConstF(g, {DType::kF32, {2, 2}}, {1, 2, 3, 4})));
    EXPECT_NE(WhyNotGeneric(g).find("holds one value per element"), std::string::npos);
  }
  {
    Graph g;
    Param(g, {DType::kF32, {8, 4}}, 0, "x");
    const int y = Param(g, {DType::kF32, {6, 4}}, 1, "y");
    Output(g, y);
    g.outer_parameters = {0, 1};
    StatusOr<ShapeClass> c = ClassifyShapes(g);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("disagree on the outer extent (8 against 6)"),
              std::string::npos)
        << c.status().ToString();
  }
}

// A node whose dimension 0 comes from a dimension that does not vary (a transpose's, a
// column sum's, a broadcast's from an inner operand dimension) cannot follow the extent, even
// where, at the graph's own extent, it has the right size to meet one that does: here the
// transposed column sums of x, broadcast back over x's shape, divide x. Classifying it as
// varying once gave kernels that read past the fixed buffer at other extents.
TEST(ClassifyShapes, ANodeWhoseDimensionZeroIsFixedMayNotMeetTheExtent) {
  Graph g;
  const int x = Param(g, {DType::kF32, {31, 31, 31}}, 0, "x");
  const int sums = Reduce(g, x, ConstScalar(g, DType::kF32, 0), {0}, ReduceKind::kSum);
  const int turned = Transpose(g, sums, {1, 0});
  const int back = Broadcast(g, turned, {31, 31, 31}, {0, 2});
  Output(g, Binary(g, OpCode::kDiv, x, back));
  const std::string why = WhyNotGeneric(g);
  EXPECT_NE(why.find("takes its dimension 0 from dimensions that do not vary"), std::string::npos)
      << why;
  EXPECT_NE(why.find("meets the outer extent"), std::string::npos) << why;

  // The same sums broadcast back along the dimensions they came from follow the extent.
  Graph ok;
  const int y = Param(ok, {DType::kF32, {31, 31, 31}}, 0, "y");
  const int column_sums = Reduce(ok, y, ConstScalar(ok, DType::kF32, 0), {0}, ReduceKind::kSum);
  Output(ok, Binary(ok, OpCode::kDiv, y, Broadcast(ok, column_sums, {31, 31, 31}, {1, 2})));
  ok.outer_parameters = {0};
  StatusOr<ShapeClass> c = ClassifyShapes(ok);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->Varies(y));
  EXPECT_FALSE(c->Varies(column_sums));
}

// A slice of the first rows has the same size at every extent that has them: the bucket
// starts no lower than its limit.
TEST(ClassifyShapes, ASliceOfTheFirstRowsRaisesTheLeastExtent) {
  Graph g;
  const int x = Param(g, {DType::kF32, {7, 4}}, 0, "x");
  const int head = Slice(g, x, {0, 0}, {6, 4});
  Output(g, Binary(g, OpCode::kAdd, x, x));
  Output(g, head);
  g.outer_parameters = {0};
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  StatusOr<ShapeClass> c = ClassifyShapes(g);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->min_extent, 6);
  EXPECT_FALSE(c->Varies(head));
  Bucket served;
  const Graph top = ToShapeClass(g, &served);
  EXPECT_EQ(served.lo, 6);
  EXPECT_EQ(served.hi, 8);
  EXPECT_TRUE(Verify(top).ok()) << Verify(top).ToString();
  EXPECT_EQ(top.nodes[head].shape.dims[0], 6);
}

TEST(OuterParameters, TheVerifierRefusesNamesThatAreNoParameterOrScalars) {
  Graph g = TokenBlock(8, 16);
  g.outer_parameters = {0, 7};
  EXPECT_NE(Verify(g).message().find("outer parameter 7 is not a parameter"), std::string::npos)
      << Verify(g).ToString();
  g.outer_parameters = {0, 0};
  EXPECT_NE(Verify(g).message().find("named twice"), std::string::npos);
  Graph s;
  const int x = Param(s, {DType::kF32, {}}, 0, "x");
  Output(s, x);
  s.outer_parameters = {0};
  EXPECT_NE(Verify(s).message().find("needs a nonempty dimension 0"), std::string::npos)
      << Verify(s).ToString();
}

TEST(OuterParameters, SurviveTheWireFormatAndChangeTheKey) {
  const Graph g = TokenBlock(8, 16);
  StatusOr<Graph> back = FromProto(ToProto(g));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->outer_parameters, g.outer_parameters);
  Graph exact = g;
  exact.outer_parameters.clear();
  EXPECT_NE(ComputeKey(g, Ctx()).hex, ComputeKey(exact, Ctx()).hex);
  Graph reordered = g;
  reordered.outer_parameters = {3, 0};
  EXPECT_EQ(ComputeKey(g, Ctx()).hex, ComputeKey(reordered, Ctx()).hex);
}

}  // namespace
}  // namespace stitch
