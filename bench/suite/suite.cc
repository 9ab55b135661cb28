#include "suite/suite.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "stitch/ir/verifier.h"
#include "suite/patterns.h"

namespace stitch::suite {
namespace {

struct Row {
  int id;
  const char* model;
  const char* pattern;
  // Where the CSV lists a range or several shapes, the point built and why.
  const char* shape_text;
  Graph (*build)();
};

// One row per line of proposed_suite_30.csv, in its order.
constexpr std::array<Row, kSuiteSize> kRows = {{
    {1, "BERT-base", "bias_add+layernorm", "x[4096,768] f32 (bs32 s128)", BertBiasLayerNorm},
    {2, "BERT-large", "bias+dropout+residual+layernorm", "x[32,128,1024] f32 (B=32)",
     BertBiasDropoutResidualLayerNorm},
    {3, "BERT-base attention", "scale+mask+softmax+dropout", "scores[8,16,128,128] f16",
     BertAttentionSoftmaxDropout},
    {4, "GPT-2", "layernorm fwd", "[8192,768] f16 (124M)", Gpt2LayerNormFwd},
    {5, "GPT-3/LLM", "layernorm fwd large hidden", "[8192,12288] f16 (GPT-3 175B hidden)",
     GptLargeHiddenLayerNormFwd},
    {6, "GPT-2", "layernorm bwd", "[16384,768] f32 (124M)", Gpt2LayerNormBwd},
    {7, "LLaMA-7B", "rmsnorm fwd", "[2048,4096] bf16", LlamaRmsNorm},
    {8, "LLaMA", "residual add + rmsnorm (2 outputs)", "[2048,4096] bf16", LlamaAddRmsNorm},
    {9, "LLaMA MLP", "SwiGLU pointwise", "[8192,11008] bf16 (T=1024)", LlamaSwiGlu},
    {10, "GPT/BERT FFN", "bias+tanh-GELU", "[4096,3072] f16 (BERT-base)", FfnBiasGelu},
    {11, "BERT FFN bwd", "gelu bwd + bias-grad column reduction", "[6,512,4096] f16",
     FfnGeluBwdBiasGrad},
    {12, "GPT vocab", "softmax row (large N)", "[8192,50304] f32", GptVocabSoftmax},
    {13, "Gemma-like attention", "softcap+mask+softmax with transpose", "[1,12,2048,2048] bf16",
     GemmaSoftcapMaskSoftmax},
    {14, "ViT-B/16", "softmax inner (attention)", "[64,12,197,197] f16", VitAttentionSoftmax},
    {15, "ViT-B/16", "layernorm bwd", "[128,197,768] f16", VitLayerNormBwd},
    {16, "ViT-B/16", "broadcast pointwise (bias/scale)", "[64,197,768] f16", VitBroadcastPointwise},
    {17, "ResNet-50", "BN fwd training (stats+normalize+ReLU)",
     "NCHW [256,64,112,112] f16, stats over {0,2,3}", ResNetBatchNormFwdRelu},
    {18, "ResNet-50", "BN bwd + ReLU grad", "NHWC [128,112,112,64] f16, stats over {0,1,2}",
     ResNetBatchNormBwdReluGrad},
    {19, "EfficientNet", "BN grad + swish grad", "[512,14,14,672] f16",
     EfficientNetBatchNormSwishGrad},
    {20, "ResNeXt", "BN channels-last", "NHWC [128,112,112,64] f16", ResNeXtBatchNormChannelsLast},
    {21, "Stable Diffusion UNet", "GroupNorm(32 groups)+swish",
     "[2,320,64,64] f16 via [2,32,10,64,64]", UnetGroupNorm32Swish},
    {22, "SD UNet", "GroupNorm 16 groups + swish", "[8,1920,32,32] f16 via [8,16,120,32,32]",
     UnetGroupNorm16Swish},
    {23, "ResNet/SE-ResNet", "scale+bias+relu (NHWC)", "[8,640,640,64] f16", ScaleBiasReluNhwc},
    {24, "CNN/Transformer layout", "transpose 2D (+relu)", "[3136,64] f32 perm (1,0)",
     Transpose2dRelu},
    {25, "Transformer heads", "transpose 0213 (split heads) + elementwise",
     "[32,128,768] f16 -> [32,12,128,64]", SplitHeadsTranspose0213},
    {26, "generic", "column reduction (bias grad)", "[8192,768] f32 over axis 0", ColumnReduction},
    {27, "generic", "row reduction (abs) + epilogue (log)", "[131072,1024] f32 over axis 1",
     RowReductionLogAbs},
    {28, "BladeDISC kStitch", "row-reduce max + neg (2 outputs)", "[11000,123] f32",
     BladeDiscRowMaxNeg},
    {29, "BladeDISC kStitch", "softmax w/ f16 cast (4 outputs)",
     "[96,512,512] f16 as [8,12,512,512]", BladeDiscSoftmaxF16Cast},
    {30, "JAX/Flax training", "dropout mask (threefry RNG) fused",
     "[1280,1280] f32, u64 counters, 20 rounds", ThreefryDropoutMask},
}};

SuiteEntry Make(const Row& row) {
  return {row.id, row.model, row.pattern, row.shape_text, row.build()};
}

}  // namespace

std::vector<SuiteEntry> BuildSuite() {
  std::vector<SuiteEntry> entries;
  entries.reserve(kRows.size());
  for (const Row& row : kRows) entries.push_back(Make(row));
  return entries;
}

StatusOr<SuiteEntry> BuildSuiteEntry(int id) {
  if (id < 1 || id > kSuiteSize) {
    return NotFound("suite entry " + std::to_string(id) + " (ids are 1.." +
                    std::to_string(kSuiteSize) + ")");
  }
  return Make(kRows[id - 1]);
}

StatusOr<std::vector<int>> ParseSuiteIds(const std::string& text) {
  std::vector<int> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long id = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || id < 1 || id > kSuiteSize) {
      return InvalidArgument("--only takes suite ids 1.." + std::to_string(kSuiteSize) + ", got '" +
                             item + "'");
    }
    ids.push_back(static_cast<int>(id));
  }
  return ids;
}

std::vector<SuiteEntry> SelectSuite(const std::vector<int>& only) {
  std::vector<SuiteEntry> entries;
  for (SuiteEntry& e : BuildSuite()) {
    if (only.empty() || std::find(only.begin(), only.end(), e.id) != only.end()) {
      entries.push_back(std::move(e));
    }
  }
  return entries;
}

}  // namespace stitch::suite
