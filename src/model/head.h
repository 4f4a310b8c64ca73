// Final norm + LM head + softmax cross-entropy (the last stage's last layer). The final norm
// ln_f is a layernorm (GPT-2: weight and bias) or an RMSNorm (Llama: weight only). The head's
// matrix W_out [V,C] is the token embedding wte when model.tie_embeddings (GPT-2), else a
// tensor of its own, lm_head.weight (initialised, sharded and checkpointed like wte, held by
// the last stage only). With tp > 1 the logits are split by vocabulary (each rank holds
// logits[N, VL] for its rows of W_out) and the cross-entropy is vocabulary-parallel: row max,
// then sum-exp and target logit are all-reduced; the full logits are never gathered.
// F:  h = ln_f(x); logits = h · W_outᵀ; loss; dlogits = scale · (softmax - onehot), computed
//     here while the logits are at hand (as llm.c does) and kept for I and W.
// I:  dh = dlogits · W_out (all-reduced over tp); dx = ln_f backward.
// W:  dW_out += dlogitsᵀ · h; ln_f weight gradients.
#pragma once
#include "backend/buffer.h"
#include "core/communicator.h"
#include "model/dims.h"
#include "model/layer.h"
#include "model/param.h"

namespace pptrain {

// lm_head.weight [V,C]: the untied output matrix, vocabulary rows split over tp (padded).
ParamSpec output_embedding_spec(const ModelDims& d);

template <typename T>
class Head final : public Layer<T> {
 public:
  Head(ParamStore& params, const ModelDims& dims, Communicator& tp);
  // `loss_scale` multiplies dlogits: 1 / (tokens in the global batch) so gradients
  // accumulate to the mean loss's gradient over all microbatches.
  void set_loss_scale(float s) { loss_scale_ = s; }
  void forward(int mb, const T* x, T* y, const MicrobatchData& data) override;
  void backward_input(int mb, const T* dy, T* dx) override;
  void backward_weight(int mb) override;
  void discard(int mb) override { slots_.release(mb); }
  size_t slot_bytes() const override;
  std::vector<const Param*> linear_weights(bool) const override { return {&out_}; }
  // Σ over the microbatch's tokens of -log p(target), read after forward (a host wait on a
  // GPU; MicrobatchData::loss_sum is the way without one).
  double loss_sum(int mb);
  // Row `row` of dlogits[N,VL] after forward, widened to fp32 into host out[VL]: with loss
  // scale 1 and no target in the shard (target -1) this is the softmax itself, which
  // sampling reads.
  void dlogits_row(int mb, int row, float* out);

 private:
  struct Slot {
    const T* x = nullptr;                 // [N,C] input (owned by the stage)
    Buffer<T> h;                          // [N,C]
    Buffer<float> mean, rstd;             // [N], [N] (mean unused by RMSNorm)
    Buffer<T> logits;                     // [N,VL]: dlogits after forward
    Buffer<float> stats;                  // [3N]: row max, sum-exp, target logit (fp32)
    Buffer<T> dh;                         // [N,C]
    Buffer<double> loss;                  // [1]: the summed loss, unless the caller gave a place
    const double* loss_at = nullptr;      // where forward wrote it
    bool has_dh = false;
  };
  std::unique_ptr<Slot> make_slot();
  void final_norm_and_logits(Slot& s, const T* x);  // s.h, s.mean/rstd, s.logits from x
  // The split cross-entropy of a vocabulary shard (tp > 1: statistics all-reduced between
  // the calls); the summed loss into `loss`.
  void logits_and_loss(Slot& s, const T* x, const MicrobatchData& data, double* loss);

  Ops& ops_;
  ModelDims dims_;
  Communicator& tp_;
  Param& lnf_w_;
  Param* lnf_b_;  // null for llama (RMSNorm)
  Param& out_;  // W_out [VL,C]: wte (tied) or lm_head.weight
  float loss_scale_ = 1.0f;
  SlotPool<Slot> slots_;
};

}  // namespace pptrain
