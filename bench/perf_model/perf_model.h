// A roofline performance model of one training step of the cuda backend on one GPU, and its
// memory footprint (bench/gpu_model.cpp prints it; tests/test_gpu_model.cpp checks it).
//
// The view is pp = 1, tp = 1: the whole model on one device, micro_batch_size ×
// microbatches sequences per step. Every GEMM is listed with FLOPs = 2·m·n·k and the bytes
// it must move; every memory-bound kernel with the minimum bytes it reads and writes. Each
// op's time is the larger of FLOPs / (peak · fraction) and bytes / (HBM bandwidth ·
// fraction) (a roofline per op), so a GEMM too thin for the tensor cores shows as memory
// bound. The op list follows the cuda backend as it is and as its fused epilogues will be
// (assumptions() states each).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/dims.h"

namespace pptrain::bench {

// Peaks of one device: dense (no sparsity) tensor-core bf16, fp32 without tensor cores,
// HBM bandwidth, and the memory a step may fill.
struct DeviceSpec {
  std::string name;
  double bf16_flops;       // FLOP/s
  double fp32_flops;       // FLOP/s
  double hbm_bytes_per_s;  // bytes/s
  double memory_bytes;     // bytes
};

// h100 | h200 | a100; throws pptrain::Error naming the accepted names otherwise.
DeviceSpec device_spec(const std::string& name);

// Fractions of the peaks that kernels achieve (stated, not measured).
struct Fractions {
  double gemm_large = 0.70;  // GEMMs with every dimension ≥ small_gemm_dim (cuBLASLt at scale)
  double gemm_small = 0.35;  // thinner GEMMs: tiles left idle, fewer waves
  double flash = 0.50;       // the handwritten flash attention's share of the tensor peak
  double hbm = 0.80;         // memory-bound kernels (streaming, coalesced)
  int small_gemm_dim = 512;
};

// One line of the table: one op kind, summed over the step.
struct OpCost {
  std::string name;
  int count = 0;       // launches per step
  double flops = 0;    // per step
  double bytes = 0;    // per step, read + written
  double ms = 0;       // per step
  bool compute_bound = false;
};

// Activation memory of one microbatch on the one stage of a pp = 1 run, as src/model
// allocates it (Block::slot_bytes, Head::slot_bytes, Stage::activation_bytes_per_microbatch).
struct ActivationBytes {
  double block;        // one Block's slot
  double head;         // the Head's slot (logits [N,V] included)
  double stage_io;     // the stage's per-layer inputs and input gradients
  double per_microbatch;
};

struct MemoryBreakdown {
  double params_fp32, grads_fp32, adam_moments, weights_bf16;  // bytes
  ActivationBytes activation;
  double in_flight;    // microbatches whose activations are alive at once (the schedule's peak)
  double activations;  // activation.per_microbatch × in_flight
  double workspace;    // backend scratch: cuBLASLt workspace, the naive attention's buffers
  double peak;         // everything above
};

struct StepPrediction {
  std::vector<OpCost> ops;
  double step_ms = 0;
  double tokens_per_step = 0, tokens_per_s = 0;
  double flops_per_token = 0;  // bench/model_flops.h: 6N + 6·L·T·C, as llm.c counts
  double mfu = 0;              // tokens_per_s · flops_per_token / bf16 peak
  MemoryBreakdown memory;
};

// The part of one Block's slot that depends on the attention kind, in bytes. `elem` is the
// activation storage size (4 fp32, 2 bf16). naive: probs [B,NH,T,T] of the storage type.
// flash: lse and delta [B,NH,T] fp32 (the T×T matrix is never stored). cudnn: its stats
// [B,NH,T] fp32. One function per the Block's layout of the attention buffers.
double attention_slot_bytes(const std::string& attention, const ModelDims& d, size_t elem);
// One Block's slot (the lists of model/block.h's Gpt2BlockBuffers and model/block_slots.h's
// SlottedBlock): the attention part plus the rest.
double block_slot_bytes(const std::string& attention, const ModelDims& d, size_t elem);
// The whole stage's activation bytes of one microbatch (pp = 1: embedding, blocks, head).
ActivationBytes activation_bytes(const std::string& attention, const ModelDims& d, size_t elem);

// Parameters, gradients, AdamW moments, bf16 copies, activations × the schedule's
// microbatches in flight (the project's simulator at pp = 1), workspace. `params`: every
// parameter of the model (the padded vocabulary included).
MemoryBreakdown memory_breakdown(const Config& cfg, double params, const ModelDims& d, size_t elem);

// The whole prediction for `cfg` (its model, precision, micro_batch_size, microbatches,
// schedule and model.attention) on `dev`.
StepPrediction predict_step(const Config& cfg, const DeviceSpec& dev, const Fractions& f);

// The assumptions behind predict_step, one per line, for the program's output.
std::vector<std::string> assumptions(const Config& cfg, const Fractions& f);

}  // namespace pptrain::bench
