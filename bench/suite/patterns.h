// The builders behind each suite entry, grouped by family (one .cc per family). Each returns
// the graph of one CSV row at the shape suite.cc's table names.
#pragma once

#include "stitch/ir/graph.h"

namespace stitch::suite {

// normalization.cc: layer norm, RMS norm, batch norm, group norm.
Graph BertBiasLayerNorm();                 // 1
Graph BertBiasDropoutResidualLayerNorm();  // 2
Graph Gpt2LayerNormFwd();                  // 4
Graph GptLargeHiddenLayerNormFwd();        // 5
Graph Gpt2LayerNormBwd();                  // 6
Graph LlamaRmsNorm();                      // 7
Graph LlamaAddRmsNorm();                   // 8
Graph VitLayerNormBwd();                   // 15
Graph ResNetBatchNormFwdRelu();            // 17
Graph ResNetBatchNormBwdReluGrad();        // 18
Graph EfficientNetBatchNormSwishGrad();    // 19
Graph ResNeXtBatchNormChannelsLast();      // 20
Graph UnetGroupNorm32Swish();              // 21
Graph UnetGroupNorm16Swish();              // 22

// softmax.cc: softmax variants.
Graph BertAttentionSoftmaxDropout();  // 3
Graph GptVocabSoftmax();              // 12
Graph GemmaSoftcapMaskSoftmax();      // 13
Graph VitAttentionSoftmax();          // 14
Graph BladeDiscSoftmaxF16Cast();      // 29

// pointwise.cc: activations, broadcasts, layouts, plain reductions, RNG.
Graph LlamaSwiGlu();              // 9
Graph FfnBiasGelu();              // 10
Graph FfnGeluBwdBiasGrad();       // 11
Graph VitBroadcastPointwise();    // 16
Graph ScaleBiasReluNhwc();        // 23
Graph Transpose2dRelu();          // 24
Graph SplitHeadsTranspose0213();  // 25
Graph ColumnReduction();          // 26
Graph RowReductionLogAbs();       // 27
Graph BladeDiscRowMaxNeg();       // 28
Graph ThreefryDropoutMask();      // 30

}  // namespace stitch::suite
