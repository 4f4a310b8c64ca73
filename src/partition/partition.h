// Cutting the model into pipeline stages. A stage is a contiguous run of transformer
// blocks; stage 0 also holds the embedding and the last stage the final layernorm, LM
// head and loss. The default ("auto") balances an analytic cost model: forward FLOPs
// per token of a block are 24·C² (QKV, proj, MLP) + 2·T·C (causal attention, half of
// QKᵀ and PV), of the head 2·C·V (the vocabulary projection), of the embedding ~0; the
// cut minimises the most expensive stage, every stage keeping at least one block.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "model/stage.h"

namespace pptrain {

// Relative forward cost (FLOPs per token) of one block and of the head.
double block_cost(const ModelConfig& m);
double head_cost(const ModelConfig& m);

// Blocks per stage for `stages` stages: explicit `layers_per_stage` when given (validated
// by the config; the first and last stage may hold none), else the balanced cut. Throws
// pptrain::Error when impossible.
std::vector<int> blocks_per_stage(const Config& c);

// "[0,4,4,1]": blocks per stage as the logs and the layers_per_stage key write them.
std::string blocks_text(const std::vector<int>& blocks);

// The StageSpec of every stage, in order.
std::vector<StageSpec> stage_specs(const Config& c);

}  // namespace pptrain
