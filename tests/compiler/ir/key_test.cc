#include "stitch/ir/key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "stitch/ir/verifier.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Softmax;

KeyContext Ctx() { return KeyContext{"sm_90", "v-test", "opts", "salt"}; }

// Returns `g` with its nodes listed in a random order that is still a valid graph, and
// every name changed.
Graph Shuffled(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> perm(g.nodes.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int> new_index(g.nodes.size());
  for (size_t k = 0; k < perm.size(); ++k) new_index[perm[k]] = static_cast<int>(k);
  Graph h;
  h.name = "renamed";
  for (size_t k = 0; k < perm.size(); ++k) {
    Node n = g.nodes[perm[k]];
    for (int& o : n.operands) o = new_index[o];
    n.name = "n" + std::to_string(rng() % 1000);
    h.nodes.push_back(n);
  }
  for (int o : g.outputs) h.outputs.push_back(new_index[o]);
  return h;
}

TEST(Key, StableAcrossRenamingAndReordering) {
  Graph g = Softmax(8, 16);
  CacheKey k = ComputeKey(g, Ctx());
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Graph h = Shuffled(g, seed);
    ASSERT_TRUE(Verify(h).ok());
    EXPECT_EQ(ComputeKey(h, Ctx()).hex, k.hex) << "seed " << seed;
  }
}

TEST(Key, IndependentNodeOrderDoesNotMatter) {
  // Two independent branches listed in either order.
  auto build = [](bool swap) {
    Graph g;
    int p = testing::Param(g, {DType::kF32, {4}}, 0);
    int a, b;
    if (swap) {
      b = testing::Unary(g, OpCode::kExp, p);
      a = testing::Unary(g, OpCode::kNeg, p);
    } else {
      a = testing::Unary(g, OpCode::kNeg, p);
      b = testing::Unary(g, OpCode::kExp, p);
    }
    g.outputs = {testing::Binary(g, OpCode::kAdd, a, b)};
    return g;
  };
  EXPECT_EQ(ComputeKey(build(false), Ctx()).hex, ComputeKey(build(true), Ctx()).hex);
}

TEST(Key, EveryIngredientChangesTheKey) {
  Graph g = Softmax(8, 16);
  const std::string base = ComputeKey(g, Ctx()).hex;
  auto differs = [&](const Graph& h, const KeyContext& c) { return ComputeKey(h, c).hex != base; };

  Graph shape = Softmax(8, 17);
  EXPECT_TRUE(differs(shape, Ctx()));
  Graph dtype = Softmax(8, 16, DType::kF16);
  EXPECT_TRUE(differs(dtype, Ctx()));

  Graph op = g;
  for (Node& n : op.nodes) {
    if (n.op == OpCode::kExp) n.op = OpCode::kTanh;
  }
  EXPECT_TRUE(differs(op, Ctx()));

  Graph attr = g;
  for (Node& n : attr.nodes) {
    if (n.op == OpCode::kReduce && n.reduce_kind == ReduceKind::kMax)
      n.reduce_kind = ReduceKind::kMin;
  }
  EXPECT_TRUE(differs(attr, Ctx()));

  Graph constant = g;
  for (Node& n : constant.nodes) {
    if (n.op == OpCode::kConstant && n.literal.f[0] == 0) n.literal.f[0] = 1;
  }
  EXPECT_TRUE(differs(constant, Ctx()));

  KeyContext target = Ctx();
  target.target = "sm_80";
  EXPECT_TRUE(differs(g, target));
  KeyContext salt = Ctx();
  salt.salt = "generation-2";
  EXPECT_TRUE(differs(g, salt));
  KeyContext version = Ctx();
  version.compiler_version = "v-next";
  EXPECT_TRUE(differs(g, version));
  KeyContext options = Ctx();
  options.options = "other";
  EXPECT_TRUE(differs(g, options));
}

TEST(Key, TheCompilerVersionCarriesTheFingerprintOfTheCompilersSources) {
  const std::string version = CompilerVersion();
  const std::string prefix = "stitchd-compiler/";
  ASSERT_EQ(version.rfind(prefix, 0), 0u) << version;
  const size_t plus = version.find('+');
  ASSERT_NE(plus, std::string::npos) << version;
  EXPECT_GT(plus, prefix.size()) << "no project version in " << version;
  const std::string fingerprint = version.substr(plus + 1);
  EXPECT_EQ(fingerprint.size(), 12u) << version;
  EXPECT_EQ(fingerprint.find_first_not_of("0123456789abcdef"), std::string::npos) << version;
  // And it is what the key's compiler component hashes by default.
  KeyContext by_default = Ctx();
  by_default.compiler_version.clear();
  KeyContext with_version = Ctx();
  with_version.compiler_version = version;
  Graph g;
  g.outputs = {testing::Unary(g, OpCode::kNeg, testing::Param(g, {DType::kF32, {4}}, 0))};
  EXPECT_EQ(ComputeKey(g, by_default).hex, ComputeKey(g, with_version).hex);
}

TEST(Key, OutputOrderMatters) {
  Graph g;
  int p = testing::Param(g, {DType::kF32, {4}}, 0);
  int a = testing::Unary(g, OpCode::kNeg, p);
  int b = testing::Unary(g, OpCode::kExp, p);
  g.outputs = {a, b};
  Graph h = g;
  h.outputs = {b, a};
  EXPECT_NE(ComputeKey(g, Ctx()).hex, ComputeKey(h, Ctx()).hex);
}

TEST(Key, ParameterNumbersMatter) {
  Graph g;
  int p0 = testing::Param(g, {DType::kF32, {4}}, 0);
  int p1 = testing::Param(g, {DType::kF32, {4}}, 1);
  g.outputs = {testing::Binary(g, OpCode::kSub, p0, p1)};
  Graph h = g;
  h.nodes[0].parameter_number = 1;
  h.nodes[1].parameter_number = 0;
  EXPECT_NE(ComputeKey(g, Ctx()).hex, ComputeKey(h, Ctx()).hex);
}

TEST(Key, ExplainNamesTheDifferingComponent) {
  Graph g = Softmax(8, 16);
  KeyContext other = Ctx();
  other.target = "sm_80";
  std::string why = ExplainKeyDifference(ComputeKey(g, Ctx()), ComputeKey(g, other));
  EXPECT_NE(why.find("target"), std::string::npos) << why;
  EXPECT_EQ(why.find("graph"), std::string::npos) << why;
  EXPECT_NE(why.find("sm_90 vs sm_80"), std::string::npos) << why;

  std::string shape_why =
      ExplainKeyDifference(ComputeKey(g, Ctx()), ComputeKey(Softmax(8, 17), Ctx()));
  EXPECT_NE(shape_why.find("graph"), std::string::npos) << shape_why;
  EXPECT_EQ(ExplainKeyDifference(ComputeKey(g, Ctx()), ComputeKey(g, Ctx())), "keys are equal");
  EXPECT_EQ(ComputeKey(g, Ctx()).hex.size(), 64u);
}

TEST(Key, DeadNodesDoNotMatter) {
  Graph g = Softmax(8, 16);
  Graph h = g;
  testing::Unary(h, OpCode::kNeg, 0);  // unused
  EXPECT_EQ(ComputeKey(g, Ctx()).hex, ComputeKey(h, Ctx()).hex);
}

}  // namespace
}  // namespace stitch
