// Activations, broadcasts, layout changes, plain reductions and a counter-based RNG.
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "suite/ops.h"
#include "suite/patterns.h"

namespace stitch::suite {
namespace {

constexpr DType kF32 = DType::kF32;
constexpr DType kF16 = DType::kF16;

// Left rotation of u32 `x` by a constant amount.
int RotateLeft(Builder& b, int x, int amount) {
  return b.Binary(OpCode::kOr, b.Binary(OpCode::kShiftLeft, x, b.SplatBits(x, amount)),
                  b.Binary(OpCode::kShiftRightLogical, x, b.SplatBits(x, 32 - amount)));
}

}  // namespace

Graph LlamaSwiGlu() {
  Builder b("llama_swiglu");
  const Dims dims = {8 * 1024, 11008};
  int gate = b.Convert(b.Param(DType::kBF16, dims, "gate"), kF32);
  int up = b.Convert(b.Param(DType::kBF16, dims, "up"), kF32);
  return std::move(b).Finish({b.Convert(b.Mul(Silu(b, gate), up), DType::kBF16)});
}

// 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3))) with h = x + bias.
Graph FfnBiasGelu() {
  Builder b("bert_ffn_bias_gelu_tanh");
  const Dims dims = {32 * 128, 3072};
  int x = b.Convert(b.Param(kF16, dims, "x"), kF32);
  int bias = b.Param(kF16, {3072}, "bias");
  int h = b.Add(x, b.Broadcast(b.Convert(bias, kF32), dims, {1}));
  int cube = b.Mul(b.Mul(h, h), h);
  int inner = b.MulC(b.Add(h, b.MulC(cube, 0.044715)), std::sqrt(2.0 / M_PI));
  int y = b.Mul(b.MulC(h, 0.5), b.AddC(b.Unary(OpCode::kTanh, inner), 1.0));
  return std::move(b).Finish({b.Convert(y, kF16)});
}

// Exact (erf) GELU gradient, dx = dy * (Phi(x) + x * phi(x)), and the bias gradient: dx
// summed over batch and sequence (a column reduction).
Graph FfnGeluBwdBiasGrad() {
  Builder b("bert_ffn_gelu_bwd_bias_grad");
  const Dims dims = {6, 512, 4096};
  int dy = b.Convert(b.Param(kF16, dims, "dy"), kF32);
  int x = b.Convert(b.Param(kF16, dims, "x"), kF32);
  int cdf = b.MulC(b.AddC(b.Unary(OpCode::kErf, b.MulC(x, M_SQRT1_2)), 1.0), 0.5);
  int pdf = b.MulC(b.Unary(OpCode::kExp, b.MulC(b.Mul(x, x), -0.5)), 0.5 * M_2_SQRTPI * M_SQRT1_2);
  int dx = b.Mul(dy, b.Add(cdf, b.Mul(x, pdf)));
  int dbias = b.Reduce(dx, ReduceKind::kSum, {0, 1});
  return std::move(b).Finish({b.Convert(dx, kF16), b.Convert(dbias, kF16)});
}

// Inner broadcast (a per-feature bias along the last dim) and outer broadcast (a per-token
// scale along the batch and sequence dims) in one chain.
Graph VitBroadcastPointwise() {
  Builder b("vit_b16_broadcast_add_mul");
  const Dims dims = {64, 197, 768};
  int x = b.Convert(b.Param(kF16, dims, "x"), kF32);
  int bias = b.Convert(b.Param(kF16, {768}, "bias"), kF32);
  int scale = b.Convert(b.Param(kF16, {64, 197}, "scale"), kF32);
  int y = b.Mul(b.Add(x, b.Broadcast(bias, dims, {2})), b.Broadcast(scale, dims, {0, 1}));
  return std::move(b).Finish({b.Convert(y, kF16)});
}

Graph ScaleBiasReluNhwc() {
  Builder b("scale_bias_relu_nhwc");
  const Dims dims = {8, 640, 640, 64};
  int x = b.Convert(b.Param(kF16, dims, "x"), kF32);
  int scale = b.Convert(b.Param(kF16, {64}, "scale"), kF32);
  int bias = b.Convert(b.Param(kF16, {64}, "bias"), kF32);
  int y = b.Add(b.Mul(x, b.Broadcast(scale, dims, {3})), b.Broadcast(bias, dims, {3}));
  return std::move(b).Finish({b.Convert(Relu(b, y), kF16)});
}

Graph Transpose2dRelu() {
  Builder b("transpose_2d_relu");
  int x = b.Param(kF32, {3136, 64}, "x");
  return std::move(b).Finish({b.Transpose(Relu(b, x), {1, 0})});
}

// Bias and query scaling on a projection output, then split heads: [B, S, H*D] ->
// [B, S, H, D] -> [B, H, S, D].
Graph SplitHeadsTranspose0213() {
  Builder b("split_heads_transpose_0213");
  const Dims dims = {32, 128, 768};
  int x = b.Convert(b.Param(kF16, dims, "x"), kF32);
  int bias = b.Convert(b.Param(kF16, {768}, "bias"), kF32);
  int q = b.MulC(b.Add(x, b.Broadcast(bias, dims, {2})), 0.125);
  int heads = b.Reshape(b.Convert(q, kF16), {32, 128, 12, 64});
  return std::move(b).Finish({b.Transpose(heads, {0, 2, 1, 3})});
}

Graph ColumnReduction() {
  Builder b("column_reduction_bias_grad");
  int dy = b.Param(kF32, {8192, 768}, "dy");
  return std::move(b).Finish({b.Reduce(dy, ReduceKind::kSum, {0})});
}

// log of each row's L1 norm: abs feeds the reduce, log is the epilogue. (log(abs(sum))
// would be as valid a chain, but with random inputs it amplifies f32 cancellation in the
// sum far beyond any kernel-vs-interpreter tolerance.)
Graph RowReductionLogAbs() {
  Builder b("row_reduction_log_abs");
  int x = b.Param(kF32, {131072, 1024}, "x");
  int l1 = b.Reduce(b.Unary(OpCode::kAbs, x), ReduceKind::kSum, {1});
  return std::move(b).Finish({b.Unary(OpCode::kLog, l1)});
}

// BladeDISC kstitch_fusion_simple: a row max and its negation, both returned.
Graph BladeDiscRowMaxNeg() {
  Builder b("bladedisc_kstitch_row_max_neg");
  int x = b.Param(kF32, {11000, 123}, "x");
  int mx = b.Reduce(x, ReduceKind::kMax, {1});
  return std::move(b).Finish({mx, b.Unary(OpCode::kNeg, mx)});
}

// JAX's dropout as XLA fuses it: u64 counters (a per-row offset plus the column iota) split
// into two u32 words, Threefry-2x32 (20 rounds, key injection every 4) with a constant key,
// the first output word turned into a float in [1, 2) by its top 23 bits, and the mask
// applied to the activations.
Graph ThreefryDropoutMask() {
  Builder b("jax_threefry_dropout");
  const Dims dims = {1280, 1280};
  constexpr std::array<int, 8> kRotations = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t k0 = 0x2a, k1 = 0x7b;
  const std::array<uint32_t, 3> ks = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  int offsets = b.Param(DType::kU64, {1280}, "row_offsets");
  int x = b.Param(kF32, dims, "x");
  int counter = b.Add(b.Broadcast(offsets, dims, {0}), b.Iota(DType::kU64, dims, 1));
  int hi = b.Convert(b.Binary(OpCode::kShiftRightLogical, counter, b.SplatBits(counter, 32)),
                     DType::kU32);
  int lo = b.Convert(counter, DType::kU32);
  int x0 = b.Add(hi, b.SplatBits(hi, ks[0]));
  int x1 = b.Add(lo, b.SplatBits(lo, ks[1]));
  for (int round = 0; round < 20; ++round) {
    x0 = b.Add(x0, x1);
    x1 = b.Binary(OpCode::kXor, RotateLeft(b, x1, kRotations[round % 8]), x0);
    if (round % 4 == 3) {
      const uint32_t j = static_cast<uint32_t>(round / 4 + 1);
      x0 = b.Add(x0, b.SplatBits(x0, ks[j % 3]));
      x1 = b.Add(x1, b.SplatBits(x1, static_cast<uint32_t>(ks[(j + 1) % 3] + j)));
    }
  }
  int mantissa = b.Binary(OpCode::kShiftRightLogical, x0, b.SplatBits(x0, 9));
  int one_to_two =
      b.BitcastConvert(b.Binary(OpCode::kOr, mantissa, b.SplatBits(mantissa, 0x3f800000)), kF32);
  int u = b.AddC(one_to_two, -1.0);
  int keep = b.Cmp(CompareDirection::kLt, u, b.Splat(u, 0.9));
  int y = b.Select(keep, b.MulC(x, 1.0 / 0.9), b.Splat(x, 0));
  return std::move(b).Finish({y});
}

}  // namespace stitch::suite
