// Transformer block (GPT-2, pre-LN):
//   x2 = x + proj(attention(qkv(ln_1(x))))
//   y  = x2 + fc2(gelu(fc1(ln_2(x2))))
// Tensor parallel (Megatron): qkv and fc1 are column-parallel (heads and hidden units
// split over tp), attention proj and fc2 row-parallel: each rank computes a partial
// product, an all-reduce sums them, then the (replicated) bias is added. The matching
// all-reduces of the input gradients of qkv and fc1 happen in backward_input (I); W does
// no communication.
#pragma once
#include "backend/buffer.h"
#include "core/communicator.h"
#include "core/faults.h"
#include "model/block_slots.h"
#include "model/dims.h"
#include "model/param.h"

namespace pptrain {

// The GPT-2 block's buffers by part (model/layer.h), each part with the list of its buffers
// and their element counts. N = B·T, C = d_model, CL = C/tp, HL = 4C/tp, NHL = NH/tp.
template <typename T>
struct Gpt2BlockBuffers {
  struct Forward {                      // read by I and W
    Buffer<T> ln1;                      // [N,C]
    Buffer<float> ln1_mean, ln1_rstd;   // [N], [N] (fp32 statistics in either precision)
    Buffer<T> attn;                     // [N,CL]  attention output before proj
    Buffer<T> x2;                       // [N,C]   residual after attention
    Buffer<T> ln2;                      // [N,C]
    Buffer<float> ln2_mean, ln2_rstd;   // [N], [N]
    Buffer<T> gelu;                     // [N,HL]
    void list(const ModelDims& d, SlotBufferVisitor& visit);
  };
  struct Gradients {                    // kept by I for W
    Buffer<T> dfc1;                     // [N,HL]  gradient at fc1's output
    Buffer<T> dln2;                     // [N,C]   gradient at ln_2's output (all-reduced)
    Buffer<T> dx2;                      // [N,C]   gradient at x2 = proj's output gradient
    Buffer<T> dqkv;                     // [N,3CL]
    Buffer<T> dln1;                     // [N,C]
    void list(const ModelDims& d, SlotBufferVisitor& visit);
  };
  struct Transient {                    // read by I only
    Buffer<T> qkv;                      // [N,3CL]
    Buffer<T> fc1;                      // [N,HL]  before GELU
    Buffer<T> dattn;                    // [N,CL]  gradient at the attention output
    void list(const ModelDims& d, SlotBufferVisitor& visit);
  };
};

// T: storage type of activations and of the weights computed with (float or bfloat16).
// Slots, scratch and recomputation (dims.recompute) as model/block_slots.h does them for
// every block; I's recompute stops before the MLP projection, whose output y the stage
// already holds (no projection GEMM, no all-reduce of y).
template <typename T>
class Block final : public SlottedBlock<T, Gpt2BlockBuffers<T>> {
 public:
  // `faults`: the planted faults acting on this rank (skip_tp_allreduce here, skip_recompute
  // in SlottedBlock; tests only). `share_scratch_with`: as SlottedBlock's.
  Block(ParamStore& params, const ModelDims& dims, int layer_index, Communicator& tp, const Faults& faults = {},
        const Block* share_scratch_with = nullptr);
  std::vector<const Param*> linear_weights(bool dgrad) const override {
    if (dgrad) return {&fc2_w_, &fc_w_, &proj_w_, &qkv_w_};
    return {&qkv_w_, &proj_w_, &fc_w_, &fc2_w_};
  }

 private:
  using Base = SlottedBlock<T, Gpt2BlockBuffers<T>>;
  using typename Base::Forward, typename Base::Gradients, typename Base::Slot, typename Base::View;
  using Base::ops_, Base::dims_, Base::tp_;

  // Sums x[n] over the tp group in place; with `keep_partial` (the planted fault
  // skip_tp_allreduce) this rank still takes part, so the others do not hang, but keeps
  // its own partial sum.
  void tp_sum(T* x, size_t n, bool keep_partial);
  // y null: stops before the MLP projection (the recompute of I).
  void run_forward(const View& v, const T* x, T* y) override;
  // The attention core as configured (dims_.fused_attention): attn from qkv, and back.
  void attention_forward(const View& v) override;
  void attention_backward_input(const View& v, const T* dattn);
  void run_backward_input(const View& v, const T* x, const T* dy, T* dx) override;
  void run_backward_weight(const Slot& s) override;

  Param &ln1_w_, &ln1_b_, &qkv_w_, &qkv_b_, &proj_w_, &proj_b_;
  Param &ln2_w_, &ln2_b_, &fc_w_, &fc_b_, &fc2_w_, &fc2_b_;
  bool keep_row_partial_ = false, keep_col_partial_ = false;  // skip_tp_allreduce:row / :col
};

}  // namespace pptrain
