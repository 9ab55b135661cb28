// Softmax variants: attention scores with mask and dropout, vocabulary-wide rows, a
// soft-capped masked softmax behind a transpose, and BladeDISC's multi-output stitch case.
#include <cmath>
#include <utility>

#include "suite/ops.h"
#include "suite/patterns.h"

namespace stitch::suite {
namespace {

constexpr DType kF32 = DType::kF32;

// Softmax over the last dim of a `t` tensor, computed in f32.
Graph SoftmaxOf(std::string name, Dims dims, DType t) {
  Builder b(std::move(name));
  int x = b.Param(t, std::move(dims), "x");
  int p = SoftmaxLastDim(b, b.Convert(x, kF32));
  return std::move(b).Finish({b.Convert(p, t)});
}

}  // namespace

// nvFuser's DivMaxSoftDrop: scores / sqrt(head_dim) + mask, softmax, dropout. The additive
// mask is per batch and key position ([B, S] broadcast over heads and queries).
Graph BertAttentionSoftmaxDropout() {
  Builder b("bert_base_attention_softmax_dropout");
  const Dims dims = {8, 16, 128, 128};
  int scores = b.Param(DType::kF16, dims, "scores");
  int mask = b.Param(DType::kF16, {8, 128}, "mask");
  int seed = b.Param(DType::kU64, {}, "seed");
  int s = b.Convert(scores, kF32);
  s = b.Div(s, b.Splat(s, std::sqrt(64.0)));
  s = b.Add(s, b.Broadcast(b.Convert(mask, kF32), dims, {0, 3}));
  int p = Dropout(b, SoftmaxLastDim(b, s), seed, 0.9, 0);
  return std::move(b).Finish({b.Convert(p, DType::kF16)});
}

Graph GptVocabSoftmax() { return SoftmaxOf("gpt_vocab_softmax", {8192, 50304}, kF32); }

Graph VitAttentionSoftmax() {
  return SoftmaxOf("vit_b16_attention_softmax", {64, 12, 197, 197}, DType::kF16);
}

// The corpus HLO (priority_fusion_test DoNotFuseTransposeIntoReduce): tanh soft-capping of
// [q, k*heads] logits, split heads and move them major (transpose {2,1,0}), mask with a
// large negative value, softmax over the last dim.
Graph GemmaSoftcapMaskSoftmax() {
  Builder b("gemma_softcap_mask_softmax_transpose");
  const int64_t s = 2048, heads = 12;
  int mask = b.Param(DType::kPred, {s, s}, "mask");
  int logits = b.Param(DType::kBF16, {s, s * heads}, "logits");
  int capped = b.MulC(b.Unary(OpCode::kTanh, b.MulC(b.Convert(logits, kF32), 0.02)), 50.0);
  int split = b.Reshape(b.Convert(capped, DType::kBF16), {s, s, heads});
  int heads_major = b.Reshape(b.Transpose(split, {2, 1, 0}), {1, heads, s, s});
  int x = b.Convert(heads_major, kF32);
  int keep = b.Broadcast(mask, b.dims(x), {2, 3});
  int masked = b.Select(keep, x, b.Splat(x, -2.38197633e38));
  return std::move(b).Finish({b.Convert(SoftmaxLastDim(b, masked), DType::kBF16)});
}

// BladeDISC's KStitchElemwiseShmCacheLarge: f16 scores reshaped to heads, divided, cast to
// f32, masked-added, softmax, cast back. Four outputs as in the MLIR: the reshaped input,
// the row max and row sum (kept as [..., 1]), and the probabilities in the input's shape.
Graph BladeDiscSoftmaxF16Cast() {
  Builder b("bladedisc_kstitch_softmax_f16_cast");
  const Dims heads = {8, 12, 512, 512};
  const Dims kept = {8, 12, 512, 1};
  const Dims last = {3};
  int a = b.Param(DType::kF16, {96, 512, 512}, "scores");
  int divisor = b.Param(DType::kF16, heads, "divisor");
  int bias = b.Param(kF32, heads, "bias");
  int reshaped = b.Reshape(a, heads);
  int x = b.Add(b.Div(b.Convert(reshaped, kF32), b.Convert(divisor, kF32)), bias);
  int mx = b.Reduce(x, ReduceKind::kMax, last);
  int e = b.Unary(OpCode::kExp, b.Sub(x, Expand(b, mx, x, last)));
  int sum = b.Reduce(e, ReduceKind::kSum, last);
  int p = b.Convert(b.Div(e, Expand(b, sum, e, last)), DType::kF16);
  return std::move(b).Finish(
      {reshaped, b.Reshape(mx, kept), b.Reshape(sum, kept), b.Reshape(p, {96, 512, 512})});
}

}  // namespace stitch::suite
