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
#include "model/dims.h"
#include "model/layer.h"
#include "model/param.h"

namespace pptrain {

// T: storage type of activations and of the weights computed with (float or bfloat16).
template <typename T>
class Block final : public Layer<T> {
 public:
  // `faults`: the planted faults acting on this rank (skip_tp_allreduce; tests only).
  Block(ParamStore& params, const ModelDims& dims, int layer_index, Communicator& tp, const Faults& faults = {});
  void forward(int mb, const T* x, T* y, const MicrobatchData& data) override;
  void backward_input(int mb, const T* dy, T* dx) override;
  void backward_weight(int mb) override;
  void discard(int mb) override { slots_.release(mb); }
  size_t slot_bytes() const override;

 private:
  // Saved per microbatch. N = B·T, C = d_model, CL = C/tp, HL = 4C/tp, NHL = NH/tp.
  struct Slot {
    const T* x = nullptr;           // [N,C]   block input (owned by the stage)
    const T* dy = nullptr;          // [N,C]   output gradient (owned by the stage)
    Buffer<T> ln1;                      // [N,C]
    Buffer<float> ln1_mean, ln1_rstd;  // [N], [N] (fp32 statistics in either precision)
    Buffer<T> qkv;                  // [N,3CL]
    Buffer<T> probs;                // [B,NHL,T,T] naive attention only
    Buffer<float> lse, delta;       // [B,NHL,T], [B,NHL,T] fused attention only (fp32 either precision)
    Buffer<T> attn;                 // [N,CL]  attention output before proj
    Buffer<T> x2;                   // [N,C]   residual after attention
    Buffer<T> ln2;                      // [N,C]
    Buffer<float> ln2_mean, ln2_rstd;  // [N], [N]
    Buffer<T> fc1;                  // [N,HL]  before GELU
    Buffer<T> gelu;                 // [N,HL]
    // kept by I for W:
    Buffer<T> dfc1;                 // [N,HL]  gradient at fc1's output
    Buffer<T> dln2;                 // [N,C]   gradient at ln_2's output (all-reduced)
    Buffer<T> dx2;                  // [N,C]   gradient at x2 = proj's output gradient
    Buffer<T> dqkv;                 // [N,3CL]
    Buffer<T> dln1;                 // [N,C]
    Buffer<T> dattn;                // [N,CL]  I's own: gradient at the attention output (W does not read it)
  };
  std::unique_ptr<Slot> make_slot();
  // Calls visit(buffer, element count) for every buffer of a slot: make_slot allocates
  // them and slot_bytes adds them up from the same list, so the two cannot disagree.
  template <typename Visit>
  void for_each_buffer(Slot& s, Visit&& visit) const;
  // Sums x[n] over the tp group in place; with `keep_partial` (the planted fault
  // skip_tp_allreduce) this rank still takes part, so the others do not hang, but keeps
  // its own partial sum.
  void tp_sum(T* x, size_t n, bool keep_partial);
  // The attention core as configured (dims_.fused_attention): s.attn from s.qkv, and back.
  void attention_forward(Slot& s);
  void attention_backward_input(Slot& s, const T* dattn);

  Ops& ops_;
  ModelDims dims_;
  Communicator& tp_;
  Param &ln1_w_, &ln1_b_, &qkv_w_, &qkv_b_, &proj_w_, &proj_b_;
  Param &ln2_w_, &ln2_b_, &fc_w_, &fc_b_, &fc2_w_, &fc2_b_;
  SlotPool<Slot> slots_;
  bool keep_row_partial_ = false, keep_col_partial_ = false;  // skip_tp_allreduce:row / :col
  Buffer<T> fault_scratch_;                                    // [N,C], only with one of them
};

}  // namespace pptrain
