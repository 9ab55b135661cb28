// One plus a tanh as a logistic: the rewrite fires on 1 + tanh(z) and 1 - tanh(z) (the tanh
// form of GELU and of its gradient), leaves every other use of a tanh alone, and the rewritten
// graph computes what the original does; in f32 the logistic keeps the accuracy that
// 1 + tanh(z) loses where it cancels.
#include "stitch/plan/tanh_rewrite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "stitch/ir/verifier.h"
#include "stitch/reference/interpreter.h"
#include "stitch/reference/tensor_compare.h"
#include "support/graph_builder.h"
#include "support/random_graph.h"

namespace stitch {
namespace {

using namespace stitch::testing;
using Dims = std::vector<int64_t>;

int Splat(Graph& g, double v, const Dims& dims) {
  return Broadcast(g, ConstScalar(g, DType::kF32, v), dims, {});
}

// GELU's tanh form, as suite row #10 writes it: 0.5 * h * (1 + tanh(sqrt(2/pi) * (h +
// 0.044715 h^3))), h = x + bias, read from and written to `io`.
Graph GeluTanh(DType io, bool one_first = false) {
  Graph g;
  g.name = "gelu_tanh";
  const Dims dims = {64, 96};
  int x = Convert(g, Param(g, {io, dims}, 0, "x"), DType::kF32);
  int bias = Convert(g, Param(g, {io, {96}}, 1, "bias"), DType::kF32);
  int h = Binary(g, OpCode::kAdd, x, Broadcast(g, bias, dims, {1}));
  int cube = Binary(g, OpCode::kMul, Binary(g, OpCode::kMul, h, h), h);
  int inner = Binary(g, OpCode::kAdd, h, Binary(g, OpCode::kMul, cube, Splat(g, 0.044715, dims)));
  int z = Binary(g, OpCode::kMul, inner, Splat(g, std::sqrt(2.0 / M_PI), dims));
  int tanh = Unary(g, OpCode::kTanh, z);
  int one = Splat(g, 1.0, dims);
  int sum = one_first ? Binary(g, OpCode::kAdd, one, tanh) : Binary(g, OpCode::kAdd, tanh, one);
  int y = Binary(g, OpCode::kMul, Binary(g, OpCode::kMul, h, Splat(g, 0.5, dims)), sum);
  g.outputs = {Convert(g, y, io)};
  return g;
}

int Count(const Graph& g, OpCode op) {
  const std::vector<bool> live = LiveNodes(g);
  int n = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) n += live[k] && g.nodes[k].op == op;
  return n;
}

std::vector<Tensor> RandomParams(const Graph& g, std::mt19937_64& rng) {
  std::vector<Tensor> params;
  for (int p : g.Parameters()) params.push_back(RandomTensor(g.nodes[p].shape, rng));
  return params;
}

// `rewritten` verifies, keeps `g`'s outputs' shapes, and the interpreter gives `g`'s outputs
// for it on random parameters.
void ExpectSameValues(const Graph& g, const Graph& rewritten, std::mt19937_64& rng) {
  ASSERT_TRUE(Verify(rewritten).ok()) << Verify(rewritten).ToString() << "\n" << ToText(rewritten);
  ASSERT_EQ(rewritten.outputs.size(), g.outputs.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    EXPECT_EQ(rewritten.nodes[rewritten.outputs[k]].shape, g.nodes[g.outputs[k]].shape) << k;
  }
  const std::vector<Tensor> params = RandomParams(g, rng);
  StatusOr<std::vector<Tensor>> want = Evaluate(g, params);
  StatusOr<std::vector<Tensor>> got = Evaluate(rewritten, params);
  ASSERT_TRUE(want.ok() && got.ok());
  for (size_t k = 0; k < want->size(); ++k) {
    const Comparison c = Compare((*want)[k], (*got)[k], OutputTolerance(g, (*want)[k].shape.dtype));
    EXPECT_TRUE(c.pass) << "output " << k << ": " << c.message;
  }
}

std::string SeedTrace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (STITCH_RANDOM_GRAPH_SEED replays it)";
}

TEST(OnePlusTanhAsLogistic, GeluTanhComputesALogisticInsteadOfItsTanh) {
  const uint64_t seed = RandomGraphBaseSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (DType io : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (bool one_first : {false, true}) {
      const Graph g = GeluTanh(io, one_first);
      SCOPED_TRACE(std::string(DTypeName(io)) + (one_first ? ", 1 + tanh" : ", tanh + 1"));
      const TanhRewrite r = RewriteOnePlusTanh(g);
      EXPECT_EQ(r.rewritten, 1);
      EXPECT_EQ(Count(r.graph, OpCode::kTanh), 0) << ToText(r.graph);
      EXPECT_EQ(Count(r.graph, OpCode::kLogistic), 1) << ToText(r.graph);
      ExpectSameValues(g, r.graph, rng);
    }
  }
}

// 1 - tanh(z) is 2 * logistic(-2z); tanh(z) - 1, tanh(z) + 2, tanh(z) + y and a sum of f16
// values are not one plus a tanh, and a tanh read elsewhere too stays for that reader.
TEST(OnePlusTanhAsLogistic, RewritesExactlyTheSumsOfOneAndATanh) {
  const uint64_t seed = RandomGraphBaseSeed() + 1;
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Dims dims = {33, 40};
  struct Case {
    const char* name;
    int rewritten, tanhs;
  };
  const auto build = [&](const std::string& form) {
    Graph g;
    g.name = form;
    int x = Param(g, {DType::kF32, dims}, 0, "x");
    int y = Param(g, {DType::kF32, dims}, 1, "y");
    int t = Unary(g, OpCode::kTanh, x);
    if (form == "one_minus") {
      g.outputs = {Binary(g, OpCode::kSub, Splat(g, 1, dims), t)};
    } else if (form == "minus_one") {
      g.outputs = {Binary(g, OpCode::kSub, t, Splat(g, 1, dims))};
    } else if (form == "plus_two") {
      g.outputs = {Binary(g, OpCode::kAdd, t, Splat(g, 2, dims))};
    } else if (form == "plus_y") {
      g.outputs = {Binary(g, OpCode::kAdd, t, y)};
    } else if (form == "f16") {
      int th = Unary(g, OpCode::kTanh, Convert(g, x, DType::kF16));
      int one = Broadcast(g, ConstScalar(g, DType::kF16, 1), dims, {});
      g.outputs = {Binary(g, OpCode::kAdd, th, one)};
    } else if (form == "tanh_read_too") {
      g.outputs = {Binary(g, OpCode::kAdd, t, Splat(g, 1, dims)), Binary(g, OpCode::kMul, t, y)};
    }
    return g;
  };
  for (const Case& c : {Case{"one_minus", 1, 0}, Case{"minus_one", 0, 1}, Case{"plus_two", 0, 1},
                        Case{"plus_y", 0, 1}, Case{"f16", 0, 1}, Case{"tanh_read_too", 1, 1}}) {
    SCOPED_TRACE(c.name);
    const Graph g = build(c.name);
    ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
    const TanhRewrite r = RewriteOnePlusTanh(g);
    EXPECT_EQ(r.rewritten, c.rewritten);
    EXPECT_EQ(Count(r.graph, OpCode::kTanh), c.tanhs) << ToText(r.graph);
    EXPECT_EQ(Count(r.graph, OpCode::kLogistic), c.rewritten) << ToText(r.graph);
    ExpectSameValues(g, r.graph, rng);
  }
}

// Where tanh(z) nears -1, 1 + tanh(z) cancels: in f32, with tanh correctly rounded, the sum's
// relative error reaches 6e-8 / (1 + tanh(z)), over 1e-3 past z = -5. The logistic form's
// stays at a few ulp of f32 for every z, as the rewrite's header says.
TEST(OnePlusTanhAsLogistic, TheLogisticKeepsF32AccuracyWhereOnePlusTanhCancels) {
  double worst_sum = 0, worst_logistic = 0;
  for (double z = -9; z <= 9; z += 1.0 / 64) {
    const double exact = 1 + std::tanh(z);
    const float zf = static_cast<float>(z);
    const float sum = 1.0f + std::tanh(zf);
    const float logistic = 2.0f / (1.0f + std::exp(-2.0f * zf));
    worst_sum = std::max(worst_sum, std::abs(sum - exact) / exact);
    worst_logistic = std::max(worst_logistic, std::abs(logistic - exact) / exact);
  }
  EXPECT_GT(worst_sum, 1e-3);
  EXPECT_LT(worst_logistic, 1e-6);
}

}  // namespace
}  // namespace stitch
