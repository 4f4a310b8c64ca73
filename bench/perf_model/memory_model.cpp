// Memory side of the performance model: activation bytes per microbatch as src/model
// allocates them, parameter and optimizer bytes, the schedule's microbatches in flight.
#include <algorithm>

#include "core/error.h"
#include "job/memory_estimate.h"
#include "perf_model.h"
#include "pipeline/registry.h"
#include "pipeline/simulate.h"

namespace pptrain::bench {

double attention_slot_bytes(const std::string& attention, const ModelDims& d, size_t elem) {
  const double b = d.batch, nh = d.local_heads(), t = d.seq_len;
  if (attention == "naive") return b * nh * t * t * double(elem);  // probs [B,NH,T,T]
  // flash and cudnn share the block's fused slot: lse and delta [B,NH,T] fp32 (cuDNN's
  // softmax statistics are the lse; it keeps its own scratch in place of delta).
  if (attention == "flash" || attention == "cudnn") return 2 * b * nh * t * 4.0;
  fail("perf model: model.attention '", attention, "' is not one of naive, flash, cudnn");
}

// Gpt2BlockBuffers' lists (model/block.h), buffer by buffer (N = B·T, C, CL = C/tp, HL = 4C/tp):
//   storage type: ln1, x2, ln2, dln2, dx2, dln1 [N,C]; qkv, dqkv [N,3CL]; attn [N,CL];
//                 fc1, gelu, dfc1 [N,HL]; dattn [N,CL]; + the attention part
//   fp32:         ln1_mean, ln1_rstd, ln2_mean, ln2_rstd [N]
double block_slot_bytes(const std::string& attention, const ModelDims& d, size_t elem) {
  const double n = d.rows(), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  const double storage = 6 * n * c + 2 * n * 3 * cl + 2 * n * cl + 3 * n * hl;
  return storage * double(elem) + 4 * n * 4.0 + attention_slot_bytes(attention, d, elem);
}

ActivationBytes activation_bytes(const std::string& attention, const ModelDims& d, size_t elem) {
  ActivationBytes a{};
  const double n = d.rows(), c = d.d_model, e = double(elem);
  a.block = block_slot_bytes(attention, d, elem);
  // Head::slot_bytes: h, dh [N,C] and logits [N,VL] of the storage type; mean, rstd and the
  // three row statistics [N] fp32; the summed loss, one double.
  a.head = e * (2 * n * c + n * d.local_vocab()) + 4.0 * 5 * n + 8.0;
  // Stage::activation_bytes_per_microbatch: an input and an input gradient [N,C] per layer
  // boundary, layers = embedding + L blocks + head, boundaries = layers + 1.
  a.stage_io = 2 * n * c * e * (d.n_layer + 3);
  a.per_microbatch = a.block * d.n_layer + a.head + a.stage_io;
  return a;
}

namespace {

// Peak number of microbatches whose activations are alive at once, from the project's
// simulator playing the configured schedule at pp = 1: a Block frees its slot in W, so
// all of a microbatch's activation counts as kept until W.
double microbatches_in_flight(const Config& cfg) {
  const std::string& name = cfg.parallel.schedule;
  const int v = name.rfind("file:", 0) == 0 ? 0 : pipeline::default_stages_per_rank(name);
  pipeline::Schedule program = pipeline::prepare_schedule(name, 1, cfg.parallel.microbatches, v);
  pipeline::CostModel cost;
  cost.act_input = 0;
  cost.act_weight = 1;
  return pipeline::simulate(program, cost).peak_activations.at(0);
}

}  // namespace

MemoryBreakdown memory_breakdown(const Config& cfg, double params, const ModelDims& d, size_t elem) {
  MemoryBreakdown m{};
  m.params_fp32 = 4 * params;
  m.grads_fp32 = 4 * params;           // fp32 accumulation in either precision
  m.adam_moments = 8 * params;         // AdamW m and v, fp32
  m.weights_bf16 = elem == 2 ? 2 * params : 0;  // the bf16 copies AdamW writes
  if (d.llama) {
    // The Llama family's slots as the job's memory estimate sizes them (one block; the head;
    // the stage's boundaries), the same functions the start-up prediction uses.
    const Precision precision = elem == 2 ? Precision::bf16 : Precision::fp32;
    const StageSlotBytes one_block = stage_slot_bytes(d, StageSpec{0, 0, 1, false, false}, precision);
    const StageSlotBytes head = stage_slot_bytes(d, StageSpec{0, 0, 0, false, true}, precision);
    const StageSlotBytes stage = stage_slot_bytes(d, StageSpec{0, 0, d.n_layer, true, true}, precision);
    m.activation.block = one_block.layers;
    m.activation.head = head.layers;
    m.activation.stage_io = stage.io;
    m.activation.per_microbatch = stage.io + stage.layers;
  } else {
    m.activation = activation_bytes(cfg.model.attention, d, elem);
  }
  m.in_flight = microbatches_in_flight(cfg);
  m.activations = m.activation.per_microbatch * m.in_flight;
  // cuBLASLt's workspace (CudaLtGemm::kMaxWorkspaceBytes, 32 MiB); the naive attention's
  // q, k, v, y buffers (4 × [B,NH,T,HD] of the storage type, CudaOps::attention_forward).
  m.workspace = double(32 << 20);
  if (cfg.model.attention == "naive") m.workspace += 4.0 * d.rows() * d.d_model * double(elem);
  m.peak = m.params_fp32 + m.grads_fp32 + m.adam_moments + m.weights_bf16 + m.activations + m.workspace;
  return m;
}

}  // namespace pptrain::bench
