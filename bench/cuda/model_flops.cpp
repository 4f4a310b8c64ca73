// model_flops CONFIG [section.key=value ...]: the training FLOPs per token and tokens per
// optimizer step of an experiment, as one JSON line, for the GPU training benchmark
// (bench/cuda/train_throughput.sh turns tokens/s into MFU with it). The formula is
// training_flops_per_token of bench/model_flops.h, the one bench_model uses. Host-only
// (no CUDA), so it is built and tested everywhere.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "../model_flops.h"
#include "core/config.h"
#include "model/dims.h"

using namespace pptrain;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: model_flops CONFIG [section.key=value ...]\n");
    return 2;
  }
  try {
    const Config cfg = load_config(argv[1], std::vector<std::string>(argv + 2, argv + argc));
    // The whole model (every TP shard together): the vocabulary as padded for tp.
    ModelConfig whole = cfg.model;
    whole.vocab_size = ModelDims::from(cfg.model, 1, cfg.parallel.tp, 0).padded_vocab();
    const bench::ModelParamCounts n = bench::model_param_counts(whole);
    const double flops_per_token = bench::model_flops_per_token(whole);
    const double tokens_per_step = double(cfg.global_batch_sequences()) * cfg.model.seq_len;
    std::printf("{\"params\": %zu, \"matmul_params\": %zu, \"flops_per_token\": %.0f, \"tokens_per_step\": %.0f}\n",
                n.total, n.matmul, flops_per_token, tokens_per_step);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_flops: %s\n", e.what());
    return 1;
  }
  return 0;
}
