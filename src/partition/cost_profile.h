// The measured costs of one model on one backend: what the planner (partition/) plans
// with, written by `pptrain profile` as a small JSON file and read back by the planner,
// by `parallel.profile: FILE` and by the simulator's `--cost FILE`.
//
// The model is a chain of layers: the embedding, n_layer identical blocks, and the head
// (final layernorm, vocabulary projection, loss). Each layer kind has its times per
// microbatch (micro_batch_size sequences of seq_len tokens) on one rank holding its tp
// shard, and its bytes. A stage's cost is the sum of its layers' costs; a stage boundary
// costs one transfer of transfer_bytes each way.
#pragma once
#include <string>
#include <vector>

namespace pptrain {

// One layer kind on one rank. Times in milliseconds per microbatch, medians of repeats.
struct LayerCost {
  double forward_ms = 0;      // F
  double input_grad_ms = 0;   // I (dgrad): the input gradient, and what W needs kept
  double weight_grad_ms = 0;  // W (wgrad): parameter gradients; frees the microbatch
  // Activation bytes one microbatch keeps on this rank, by when they are taken and freed
  // (the simulator's act_input, act_weight and act_from_input):
  //   act_fi_bytes          taken by F, freed by I
  //   act_iw_bytes          taken by F, kept until W
  //   act_from_input_bytes  taken by I, kept until W
  // What pptrain's layers do (model/layer.h): a layer's slot is taken whole by F and
  // freed whole by W, so a profile of them has act_fi_bytes 0 and the slot in
  // act_iw_bytes; a block under training.recompute: full takes the slot W needs at I
  // instead (act_from_input_bytes), keeping only its output from F. So a microbatch holds
  // act_fi + act_iw between F and I, act_iw + act_from_input between I and W, exactly.
  // A layer's bytes are its slots and its output tensor with that tensor's gradient ([N,C]
  // each; none for the head, whose output is the loss); a stage that does not start with
  // the embedding also keeps its received input and the input gradient it sends back:
  // 2 · transfer_bytes.
  double act_fi_bytes = 0;
  double act_iw_bytes = 0;
  double act_from_input_bytes = 0;
  // Bytes that do not depend on microbatches: fp32 parameters, their fp32 gradients and
  // (bf16 runs) bf16 working copies in param_bytes; the two fp32 AdamW moments in
  // optim_bytes. The token embedding, tied to the LM head, is counted in both the
  // embedding's and the head's bytes: stages on different ranks each hold a copy, one rank
  // holding both layers holds it once (tied_embedding_*_bytes below is that copy).
  double param_bytes = 0;
  double optim_bytes = 0;
};

// The layer kinds measured at another tp degree than the profile's: each rank its shard,
// the tp all-reduces of F and I included as they ran. The planner takes these for layouts
// of that tp instead of the stated scaling model.
struct TpLayerCosts {
  int tp = 1;
  LayerCost embedding, block, head;
  LayerCost block_attention, block_full;  // as in CostProfile
};

struct CostProfile {
  // What it was measured for: a profile applies only to the same shapes and backend.
  std::string device = "cpu";     // cpu | cuda
  std::string precision = "fp32"; // fp32 | bf16
  std::string attention;          // the attention implementation timed (naive | flash | cudnn)
  int n_layer = 0, micro_batch_size = 0, seq_len = 0, d_model = 0, n_head = 0, vocab_size = 0;
  int tp = 1;  // the tp degree the layer costs were measured at (each rank its shard)

  LayerCost embedding, block, head;
  // The block again under training.recompute: attention and full, each measured as it runs
  // (I's time includes the forward it re-runs; the bytes where that mode places them).
  // With fused attention (flash, cudnn) `attention` is none (model/dims.h), so
  // block_attention is measured as the block under none.
  LayerCost block_attention, block_full;
  // Measured at larger tp degrees too (ascending, each once; empty: none).
  std::vector<TpLayerCosts> other_tp;

  // One stage-to-stage tensor ([micro_batch_size·seq_len, d_model] in the activation
  // type) and the median time of one point-to-point transfer of it between two ranks over
  // the job's communicator (MPI on cpu, NCCL on cuda); 0 when measured on one rank.
  double transfer_bytes = 0;
  double transfer_ms = 0;
  // All-reduce time model t(bytes) = allreduce_latency_ms + bytes / allreduce_bytes_per_ms,
  // fitted to measured all-reduces over the ranks profiled (2 ranks or more), or stated
  // defaults when profiled on one rank (allreduce_measured false). Used for tp and dp.
  double allreduce_latency_ms = 0;
  double allreduce_bytes_per_ms = 0;
  bool allreduce_measured = false;
  int allreduce_ranks = 1;  // the ranks the model was fitted over (1: stated defaults)
  // The per-step work on every parameter element after the pipeline flush: zeroing its
  // gradient, its share of the gradient norm and its AdamW update, in nanoseconds per fp32
  // element (timed over one block's parameters).
  double update_ns_per_param = 0;
};

// JSON text of a profile (one object, keys as the members above; layer kinds as nested
// objects "embedding", "block", "head"; other_tp an array of objects with "tp" and the
// three layer kinds and the two recompute blocks).
std::string to_json(const CostProfile& p);

// Reads a profile written by to_json. Untrusted: a regular file, every key known and
// present (a file from before the recompute costs lacks act_from_input_bytes,
// block_attention and block_full: refused with a line saying to profile again, since a
// profile is seconds to take and one silently without them would hide recompute from the
// planner), numbers finite and >= 0, shapes >= 1, other_tp's degrees ascending and above tp;
// an error is one line naming the file and
// the key (pptrain::Error).
CostProfile read_cost_profile(const std::string& path);
// The same from text (`what` names it in errors).
CostProfile parse_cost_profile(const std::string& json, const std::string& what);
// Writes to_json(p) to `path` atomically (PATH.tmp, then renamed over it).
void write_cost_profile(const CostProfile& p, const std::string& path);

// The bytes of the tied token embedding wte [padded vocab / tp, d_model] counted in both
// `embedding` and `head` (param: fp32 value and gradient, + bf16 copy; optim: two fp32
// moments): what a rank holding both layers subtracts once.
double tied_embedding_param_bytes(const CostProfile& p);
double tied_embedding_optim_bytes(const CostProfile& p);

// The block's costs of `p` (or of a TpLayerCosts) under training.recompute mode `mode`
// (none | attention | full).
template <typename Costs>
const LayerCost& block_cost(const Costs& p, const std::string& mode) {
  return mode == "full" ? p.block_full : mode == "attention" ? p.block_attention : p.block;
}

// The largest cost file read_cost_profile accepts (a profile is well under 2 KiB).
inline constexpr unsigned long long kMaxCostProfileBytes = 1 << 16;

}  // namespace pptrain
