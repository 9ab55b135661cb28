// GELU's tanh form compiled: 1 + tanh(z) reaches the kernels as 2 logistic(2z)
// (tanh_rewrite.h), so no kernel calls libdevice's tanhf; the logistic's exp is the
// approximate one where the value reaches only f16 or bf16 outputs and libdevice's exact expf
// for f32 outputs; and the kernels match the interpreter on the emulator, which evaluates the
// graph as written, in every dtype. A tanh read otherwise stays a tanh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "stitch/driver/compile.h"
#include "support/emulator_check.h"
#include "support/graph_builder.h"

namespace stitch {
namespace {

using testing::Binary;
using testing::Broadcast;
using testing::ConstScalar;
using testing::Convert;
using testing::Param;
using testing::Unary;

constexpr uint64_t kSeed = 7300;

int Splat(Graph& g, double v, const std::vector<int64_t>& dims) {
  return Broadcast(g, ConstScalar(g, DType::kF32, v), dims, {});
}

// 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 h^3))) with h = x + bias, in and out in
// `io`; with `tanh_scaled`, 0.5 * h * tanh(...) instead, a tanh that is not in a sum with one.
Graph Gelu(DType io, bool tanh_scaled = false) {
  Graph g;
  g.name = tanh_scaled ? "scaled_tanh" : "gelu_tanh";
  const std::vector<int64_t> dims = {96, 160};
  int x = Convert(g, Param(g, {io, dims}, 0, "x"), DType::kF32);
  int bias = Convert(g, Param(g, {io, {160}}, 1, "bias"), DType::kF32);
  int h = Binary(g, OpCode::kAdd, x, Broadcast(g, bias, dims, {1}));
  int cube = Binary(g, OpCode::kMul, Binary(g, OpCode::kMul, h, h), h);
  int inner = Binary(g, OpCode::kAdd, h, Binary(g, OpCode::kMul, cube, Splat(g, 0.044715, dims)));
  int tanh =
      Unary(g, OpCode::kTanh, Binary(g, OpCode::kMul, inner, Splat(g, std::sqrt(2 / M_PI), dims)));
  int factor = tanh_scaled ? tanh : Binary(g, OpCode::kAdd, tanh, Splat(g, 1, dims));
  int y = Binary(g, OpCode::kMul, Binary(g, OpCode::kMul, h, Splat(g, 0.5, dims)), factor);
  g.outputs = {Convert(g, y, io)};
  return g;
}

bool Calls(const CompileResult& r, const std::string& name) {
  return std::any_of(r.kernels.begin(), r.kernels.end(), [&](const CompiledKernel& k) {
    return k.portable_ir.find(name) != std::string::npos;
  });
}

TEST(TanhAsLogistic, GeluTanhKernelsComputeALogisticAndMatchTheInterpreter) {
  uint64_t seed = kSeed;
  for (DType io : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(io)) + ", seed " + std::to_string(seed));
    testing::EmulatorCheck check;
    ASSERT_TRUE(testing::CheckOnEmulator(Gelu(io), seed++, /*random_order=*/false, &check));
    const CompileResult& r = check.compiled;
    EXPECT_FALSE(Calls(r, "__nv_tanhf"));
    const bool half = io != DType::kF32;
    EXPECT_EQ(Calls(r, "__nv_fast_expf"), half);
    EXPECT_EQ(Calls(r, "__nv_expf"), !half);
  }
}

// A tanh outside a sum with one stays a tanh: libdevice's for an f32 output, and for an f16
// one the approximate tanh, 1 - 2 / (1 + e^2|z|) over the approximate exp and division.
TEST(TanhAsLogistic, ATanhOutsideASumWithOneStaysATanh) {
  for (DType io : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(io));
    testing::EmulatorCheck check;
    ASSERT_TRUE(testing::CheckOnEmulator(Gelu(io, /*tanh_scaled=*/true), kSeed + 10,
                                         /*random_order=*/false, &check));
    const std::vector<Node>& nodes = check.compiled.graph.nodes;
    EXPECT_TRUE(std::any_of(nodes.begin(), nodes.end(),
                            [](const Node& n) { return n.op == OpCode::kTanh; }));
    EXPECT_EQ(Calls(check.compiled, "__nv_tanhf"), io == DType::kF32);
    EXPECT_EQ(Calls(check.compiled, "__nv_fast_expf"), io != DType::kF32);
  }
}

}  // namespace
}  // namespace stitch
