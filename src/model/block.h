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
// Recomputation (dims.recompute, model/layer.h's BlockSlotPlacement): the forward of I's
// recompute runs the same ops in the same order as F, the tp all-reduce after the attention
// projection included (every tp rank recomputes), so it yields the same bits; it stops
// before the MLP projection, whose output y the stage already holds (no projection GEMM, no
// all-reduce of y).
template <typename T>
class Block final : public Layer<T> {
 public:
  // `faults`: the planted faults acting on this rank (skip_tp_allreduce, skip_recompute; tests only).
  // `share_scratch_with`: an earlier block of the same stage whose recompute scratch this
  // one uses too (null: a scratch of its own).
  Block(ParamStore& params, const ModelDims& dims, int layer_index, Communicator& tp, const Faults& faults = {},
        const Block* share_scratch_with = nullptr);
  void forward(int mb, const T* x, T* y, const MicrobatchData& data) override;
  void backward_input(int mb, const T* dy, T* dx) override;
  void backward_weight(int mb) override;
  void discard(int mb) override;
  size_t slot_bytes() const override { return bytes_of(slots_.placement().at_forward); }
  size_t slot_bytes_from_input() const override { return bytes_of(slots_.placement().at_input); }
  size_t scratch_bytes() const override { return bytes_of(slots_.placement().scratch); }

 private:
  // A microbatch's buffers by part (model/layer.h). N = B·T, C = d_model, CL = C/tp,
  // HL = 4C/tp, NHL = NH/tp.
  struct Forward {                      // read by I and W
    Buffer<T> ln1;                      // [N,C]
    Buffer<float> ln1_mean, ln1_rstd;   // [N], [N] (fp32 statistics in either precision)
    Buffer<T> attn;                     // [N,CL]  attention output before proj
    Buffer<T> x2;                       // [N,C]   residual after attention
    Buffer<T> ln2;                      // [N,C]
    Buffer<float> ln2_mean, ln2_rstd;   // [N], [N]
    Buffer<T> gelu;                     // [N,HL]
  };
  struct Gradients {                    // kept by I for W
    Buffer<T> dfc1;                     // [N,HL]  gradient at fc1's output
    Buffer<T> dln2;                     // [N,C]   gradient at ln_2's output (all-reduced)
    Buffer<T> dx2;                      // [N,C]   gradient at x2 = proj's output gradient
    Buffer<T> dqkv;                     // [N,3CL]
    Buffer<T> dln1;                     // [N,C]
  };
  struct Transient {                    // read by I only
    Buffer<T> qkv;                      // [N,3CL]
    Buffer<T> fc1;                      // [N,HL]  before GELU
    Buffer<float> lse, delta;           // [B,NHL,T], [B,NHL,T] fused attention only (fp32 either precision)
    Buffer<T> dattn;                    // [N,CL]  gradient at the attention output
  };
  struct Slot {
    const T* x = nullptr;   // [N,C]   block input (owned by the stage)
    const T* dy = nullptr;  // [N,C]   output gradient (owned by the stage)
    Forward f;
    Gradients g;
    Transient t;
    Buffer<T> probs;        // [B,NHL,T,T] naive attention only
  };
  // One pass's buffers, each part from the slot that holds it (a microbatch's or the scratch).
  struct View {
    Forward& f;
    Gradients& g;
    Transient& t;
    Buffer<T>& probs;
  };
  // Calls visit(buffer, element count) for every buffer of the parts `parts` of a slot:
  // allocating and counting use the same list, so they cannot disagree.
  template <typename Visit>
  void for_each_buffer(Slot& s, unsigned parts, Visit&& visit) const;
  std::unique_ptr<Slot> make_slot(unsigned parts);
  size_t bytes_of(unsigned parts) const;
  Slot& scratch();
  // The parts placed per microbatch from `mb_slot` (null: none yet, F under full), the
  // others from the scratch.
  View view(Slot* mb_slot, unsigned mb_parts);
  // Sums x[n] over the tp group in place; with `keep_partial` (the planted fault
  // skip_tp_allreduce) this rank still takes part, so the others do not hang, but keeps
  // its own partial sum.
  void tp_sum(T* x, size_t n, bool keep_partial);
  // The forward from x into v; y [N,C] the block output, or null to stop before the MLP
  // projection (the recompute of I).
  void run_forward(const View& v, const T* x, T* y);
  // The attention core as configured (dims_.fused_attention): attn from qkv, and back.
  void attention_forward(const View& v);
  void attention_backward_input(const View& v, const T* dattn);

  Ops& ops_;
  ModelDims dims_;
  Communicator& tp_;
  Param &ln1_w_, &ln1_b_, &qkv_w_, &qkv_b_, &proj_w_, &proj_b_;
  Param &ln2_w_, &ln2_b_, &fc_w_, &fc_b_, &fc2_w_, &fc2_b_;
  BlockSlots<Slot, T> slots_;  // a microbatch's slot, taken by F or (full recompute) by I
  std::shared_ptr<SharedScratch<Slot>> scratch_;
  bool skip_recompute_ = false;                                // the planted fault skip_recompute
  bool keep_row_partial_ = false, keep_col_partial_ = false;  // skip_tp_allreduce:row / :col
  Buffer<T> fault_scratch_;                                    // [N,C], only with one of these faults
};

}  // namespace pptrain
