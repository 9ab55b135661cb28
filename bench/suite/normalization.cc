// Normalization layers: layer norm (forward and backward), RMS norm, batch norm (forward,
// backward, channels first and last) and group norm. Statistics are computed in f32 from
// f16/bf16 inputs, as XLA's float-normalization pass leaves them.
#include <utility>

#include "suite/ops.h"
#include "suite/patterns.h"

namespace stitch::suite {
namespace {

constexpr DType kF32 = DType::kF32;

// Per-feature parameter `p` (dims {n}) converted to f32 and broadcast along `axis` of `like`.
int PerFeature(Builder& b, int p, int like, int64_t axis) {
  return b.Broadcast(b.Convert(p, kF32), b.dims(like), {axis});
}

// (x - mean) * rsqrt(var + eps) * gamma + beta over the last dimension of f32 `x`, with a
// two-pass variance (mean of squared deviations).
int LayerNormLastDim(Builder& b, int x, int gamma, int beta, double eps) {
  const int64_t h = b.shape(x).rank() - 1;
  const Dims last = {h};
  int mean = Mean(b, x, last);
  int centered = b.Sub(x, Expand(b, mean, x, last));
  int var = Mean(b, b.Mul(centered, centered), last);
  int rstd = b.Unary(OpCode::kRsqrt, b.AddC(var, eps));
  int normed = b.Mul(centered, Expand(b, rstd, x, last));
  return b.Add(b.Mul(normed, PerFeature(b, gamma, x, h)), PerFeature(b, beta, x, h));
}

// x * rsqrt(mean(x^2) + eps) * w over the last dimension of f32 `x`.
int RmsNormLastDim(Builder& b, int x, int w, double eps) {
  const int64_t h = b.shape(x).rank() - 1;
  const Dims last = {h};
  int ms = Mean(b, b.Mul(x, x), last);
  int rstd = b.Unary(OpCode::kRsqrt, b.AddC(ms, eps));
  return b.Mul(b.Mul(x, Expand(b, rstd, x, last)), PerFeature(b, w, x, h));
}

// Layer norm forward on [tokens, hidden] of dtype `t` with affine parameters of dtype `t`.
Graph LayerNormFwd(std::string name, int64_t tokens, int64_t hidden, DType t) {
  Builder b(std::move(name));
  int x = b.Param(t, {tokens, hidden}, "x");
  int gamma = b.Param(t, {hidden}, "gamma");
  int beta = b.Param(t, {hidden}, "beta");
  int y = LayerNormLastDim(b, b.Convert(x, kF32), gamma, beta, 1e-5);
  return std::move(b).Finish({b.Convert(y, t)});
}

// Layer norm backward over the last dim of `dims`, from the saved f32 mean and rstd:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, and the weight
// gradients reduced over every other dim (column reductions).
Graph LayerNormBwd(std::string name, Dims dims, DType t) {
  Builder b(std::move(name));
  const int64_t h = static_cast<int64_t>(dims.size()) - 1;
  const Dims last = {h};
  Dims rows_only(dims.begin(), dims.end() - 1), row_axes;
  for (int64_t d = 0; d < h; ++d) row_axes.push_back(d);
  int dy = b.Convert(b.Param(t, dims, "dy"), kF32);
  int x = b.Convert(b.Param(t, dims, "x"), kF32);
  int mean = b.Param(kF32, rows_only, "mean");
  int rstd = Expand(b, b.Param(kF32, rows_only, "rstd"), x, last);
  int gamma = b.Param(t, {dims[h]}, "gamma");
  int xhat = b.Mul(b.Sub(x, Expand(b, mean, x, last)), rstd);
  int g = b.Mul(dy, PerFeature(b, gamma, dy, h));
  int mean_g = Expand(b, Mean(b, g, last), g, last);
  int mean_gx = Expand(b, Mean(b, b.Mul(g, xhat), last), g, last);
  int dx = b.Mul(rstd, b.Sub(b.Sub(g, mean_g), b.Mul(xhat, mean_gx)));
  int dgamma = b.Reduce(b.Mul(dy, xhat), ReduceKind::kSum, row_axes);
  int dbeta = b.Reduce(dy, ReduceKind::kSum, row_axes);
  return std::move(b).Finish({b.Convert(dx, t), b.Convert(dgamma, t), b.Convert(dbeta, t)});
}

// Training batch norm forward on f16 `dims`, statistics over every dim but `channel`.
// Returns y (f16) and the saved f32 mean and rstd that the backward pass reads.
Graph BatchNormFwd(std::string name, Dims dims, int64_t channel, bool relu) {
  Builder b(std::move(name));
  Dims reduced;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d != channel) reduced.push_back(d);
  }
  int x = b.Convert(b.Param(DType::kF16, dims, "x"), kF32);
  int gamma = b.Param(DType::kF16, {dims[channel]}, "gamma");
  int beta = b.Param(DType::kF16, {dims[channel]}, "beta");
  int mean = Mean(b, x, reduced);
  int centered = b.Sub(x, Expand(b, mean, x, reduced));
  int var = Mean(b, b.Mul(centered, centered), reduced);
  int rstd = b.Unary(OpCode::kRsqrt, b.AddC(var, 1e-5));
  int y = b.Mul(centered, Expand(b, rstd, x, reduced));
  y = b.Add(b.Mul(y, PerFeature(b, gamma, x, channel)), PerFeature(b, beta, x, channel));
  if (relu) y = Relu(b, y);
  return std::move(b).Finish({b.Convert(y, DType::kF16), mean, rstd});
}

// GroupNorm + swish on f16 NCHW: reshape to [N, G, C/G, H, W], normalise over the last
// three dims, reshape back, per-channel affine, then x * sigmoid(x).
Graph GroupNormSwish(std::string name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t groups) {
  Builder b(std::move(name));
  const Dims nchw = {n, c, h, w};
  const Dims grouped = {n, groups, c / groups, h, w};
  const Dims stats = {2, 3, 4};
  int x = b.Convert(b.Param(DType::kF16, nchw, "x"), kF32);
  int gamma = b.Param(DType::kF16, {c}, "gamma");
  int beta = b.Param(DType::kF16, {c}, "beta");
  int xg = b.Reshape(x, grouped);
  int mean = Mean(b, xg, stats);
  int centered = b.Sub(xg, Expand(b, mean, xg, stats));
  int var = Mean(b, b.Mul(centered, centered), stats);
  int rstd = b.Unary(OpCode::kRsqrt, b.AddC(var, 1e-5));
  int normed = b.Reshape(b.Mul(centered, Expand(b, rstd, xg, stats)), nchw);
  int y = b.Add(b.Mul(normed, PerFeature(b, gamma, normed, 1)), PerFeature(b, beta, normed, 1));
  return std::move(b).Finish({b.Convert(Silu(b, y), DType::kF16)});
}

}  // namespace

Graph BertBiasLayerNorm() {
  Builder b("bert_base_bias_layernorm");
  const int64_t tokens = 32 * 128, hidden = 768;
  int x = b.Param(kF32, {tokens, hidden}, "x");
  int bias = b.Param(kF32, {hidden}, "bias");
  int gamma = b.Param(kF32, {hidden}, "gamma");
  int beta = b.Param(kF32, {hidden}, "beta");
  int biased = b.Add(x, PerFeature(b, bias, x, 1));
  int y = LayerNormLastDim(b, biased, gamma, beta, 1e-12);
  return std::move(b).Finish({y});
}

Graph BertBiasDropoutResidualLayerNorm() {
  Builder b("bert_large_bias_dropout_residual_layernorm");
  const Dims dims = {32, 128, 1024};
  int x = b.Param(kF32, dims, "x");
  int bias = b.Param(kF32, {1024}, "bias");
  int residual = b.Param(kF32, dims, "residual");
  int gamma = b.Param(kF32, {1024}, "gamma");
  int beta = b.Param(kF32, {1024}, "beta");
  int seed = b.Param(DType::kU64, {}, "seed");
  int dropped = Dropout(b, b.Add(x, PerFeature(b, bias, x, 2)), seed, 0.9, 0);
  int y = LayerNormLastDim(b, b.Add(dropped, residual), gamma, beta, 1e-12);
  return std::move(b).Finish({y});
}

Graph Gpt2LayerNormFwd() { return LayerNormFwd("gpt2_layernorm_fwd", 8192, 768, DType::kF16); }

Graph GptLargeHiddenLayerNormFwd() {
  return LayerNormFwd("gpt3_layernorm_fwd_h12288", 8192, 12288, DType::kF16);
}

Graph Gpt2LayerNormBwd() { return LayerNormBwd("gpt2_layernorm_bwd", {16384, 768}, DType::kF32); }

Graph VitLayerNormBwd() {
  return LayerNormBwd("vit_b16_layernorm_bwd", {128, 197, 768}, DType::kF16);
}

Graph LlamaRmsNorm() {
  Builder b("llama7b_rmsnorm");
  int x = b.Param(DType::kBF16, {2048, 4096}, "x");
  int w = b.Param(DType::kBF16, {4096}, "weight");
  int y = RmsNormLastDim(b, b.Convert(x, kF32), w, 1e-6);
  return std::move(b).Finish({b.Convert(y, DType::kBF16)});
}

// Returns the normalised output and the residual sum, which feeds the next residual add.
Graph LlamaAddRmsNorm() {
  Builder b("llama_fused_add_rmsnorm");
  int x = b.Param(DType::kBF16, {2048, 4096}, "x");
  int residual = b.Param(DType::kBF16, {2048, 4096}, "residual");
  int w = b.Param(DType::kBF16, {4096}, "weight");
  int sum = b.Add(b.Convert(x, kF32), b.Convert(residual, kF32));
  int y = RmsNormLastDim(b, sum, w, 1e-6);
  return std::move(b).Finish({b.Convert(y, DType::kBF16), b.Convert(sum, DType::kBF16)});
}

Graph ResNetBatchNormFwdRelu() {
  return BatchNormFwd("resnet50_bn_fwd_relu_nchw", {256, 64, 112, 112}, 1, /*relu=*/true);
}

Graph ResNeXtBatchNormChannelsLast() {
  return BatchNormFwd("resnext_bn_fwd_nhwc", {128, 112, 112, 64}, 3, /*relu=*/false);
}

// TF's layout {1,3,2,0} is NHWC in memory; stitch graphs are row-major, so the graph is
// built on the physical [N,H,W,C] order. The per-channel statistics are f32, as in the
// corpus HLO. dx = gamma * rstd / M * (M * dy' - sum(dy') - xhat * sum(dy' * xhat)) with
// dy' the ReLU-masked gradient and M = N*H*W.
Graph ResNetBatchNormBwdReluGrad() {
  Builder b("resnet50_bn_bwd_relu_grad_nhwc");
  const Dims dims = {128, 112, 112, 64};
  const Dims nhw = {0, 1, 2};
  const double m = 128.0 * 112 * 112;
  int dy = b.Param(DType::kF16, dims, "dy");
  int y = b.Param(DType::kF16, dims, "relu_out");
  int x = b.Convert(b.Param(DType::kF16, dims, "x"), kF32);
  int mean = b.Param(kF32, {64}, "mean");
  int rstd = b.Param(kF32, {64}, "rstd");
  int gamma = b.Param(kF32, {64}, "gamma");
  int active = b.Cmp(CompareDirection::kGt, y, b.Splat(y, 0));
  int g = b.Convert(b.Select(active, dy, b.Splat(dy, 0)), kF32);
  int xhat = b.Mul(b.Sub(x, Expand(b, mean, x, nhw)), Expand(b, rstd, x, nhw));
  int dbeta = b.Reduce(g, ReduceKind::kSum, nhw);
  int dgamma = b.Reduce(b.Mul(g, xhat), ReduceKind::kSum, nhw);
  int scale = b.MulC(b.Mul(gamma, rstd), 1.0 / m);
  int inner =
      b.Sub(b.Sub(b.MulC(g, m), Expand(b, dbeta, g, nhw)), b.Mul(xhat, Expand(b, dgamma, g, nhw)));
  int dx = b.Mul(Expand(b, scale, g, nhw), inner);
  return std::move(b).Finish({b.Convert(dx, DType::kF16), dgamma, dbeta});
}

// The corpus HLO's fusion: statistics arrive as per-channel sums (f32[672]) from earlier
// reductions, so this is one elementwise chain: BN forward recomputed, swish gradient, BN
// gradient.
Graph EfficientNetBatchNormSwishGrad() {
  Builder b("efficientnet_bn_grad_swish_grad");
  const Dims dims = {512, 14, 14, 672};
  const Dims nhw = {0, 1, 2};
  const double m = 512.0 * 14 * 14;
  int x = b.Convert(b.Param(DType::kF16, dims, "x"), kF32);
  int dy = b.Convert(b.Param(DType::kF16, dims, "dy"), kF32);
  int sum_x = b.Param(kF32, {672}, "sum_x");
  int sum_x2 = b.Param(kF32, {672}, "sum_x2");
  int gamma = b.Param(kF32, {672}, "gamma");
  int beta = b.Param(kF32, {672}, "beta");
  int sum_g = b.Param(kF32, {672}, "sum_g");
  int sum_g_xc = b.Param(kF32, {672}, "sum_g_xc");
  int mean = b.MulC(sum_x, 1.0 / m);
  int var_eps = b.AddC(b.Sub(b.MulC(sum_x2, 1.0 / m), b.Mul(mean, mean)), 1e-3);
  int rstd = b.Unary(OpCode::kRsqrt, var_eps);
  int xc = b.Sub(x, Expand(b, mean, x, nhw));
  int y = b.Add(b.Mul(b.Mul(xc, Expand(b, rstd, x, nhw)), Expand(b, gamma, x, nhw)),
                Expand(b, beta, x, nhw));
  int s = b.Unary(OpCode::kLogistic, y);
  int one_minus_s = b.Sub(b.Splat(s, 1), s);
  int g = b.Mul(dy, b.Mul(s, b.AddC(b.Mul(y, one_minus_s), 1)));
  int centered_term = b.Div(b.Mul(xc, Expand(b, sum_g_xc, x, nhw)), Expand(b, var_eps, x, nhw));
  int inner = b.Sub(b.Sub(b.MulC(g, m), Expand(b, sum_g, x, nhw)), centered_term);
  int scale = b.MulC(b.Mul(gamma, rstd), 1.0 / m);
  int dx = b.Mul(Expand(b, scale, x, nhw), inner);
  return std::move(b).Finish({b.Convert(dx, DType::kF16)});
}

Graph UnetGroupNorm32Swish() {
  return GroupNormSwish("sd_unet_groupnorm32_swish", 2, 320, 64, 64, 32);
}

Graph UnetGroupNorm16Swish() {
  return GroupNormSwish("sd_unet_groupnorm16_swish", 8, 1920, 32, 32, 16);
}

}  // namespace stitch::suite
