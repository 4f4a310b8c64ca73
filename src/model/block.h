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
#include "model/dims.h"
#include "model/layer.h"
#include "model/param.h"

namespace pptrain {

class Block final : public Layer {
 public:
  Block(ParamStore& params, const ModelDims& dims, int layer_index, Communicator& tp);
  void forward(int mb, const float* x, float* y, const MicrobatchData& data) override;
  void backward_input(int mb, const float* dy, float* dx) override;
  void backward_weight(int mb) override;
  void discard(int mb) override { slots_.release(mb); }
  size_t slot_bytes() const override;

 private:
  // Saved per microbatch. N = B·T, C = d_model, CL = C/tp, HL = 4C/tp, NHL = NH/tp.
  struct Slot {
    const float* x = nullptr;       // [N,C]   block input (owned by the stage)
    const float* dy = nullptr;      // [N,C]   output gradient (owned by the stage)
    Buffer<float> ln1, ln1_mean, ln1_rstd;   // [N,C], [N], [N]
    Buffer<float> qkv;              // [N,3CL]
    Buffer<float> probs;            // [B,NHL,T,T]
    Buffer<float> attn;             // [N,CL]  attention output before proj
    Buffer<float> x2;               // [N,C]   residual after attention
    Buffer<float> ln2, ln2_mean, ln2_rstd;   // [N,C], [N], [N]
    Buffer<float> fc1;              // [N,HL]  before GELU
    Buffer<float> gelu;             // [N,HL]
    // kept by I for W:
    Buffer<float> dfc1;             // [N,HL]  gradient at fc1's output
    Buffer<float> dln2;             // [N,C]   gradient at ln_2's output (all-reduced)
    Buffer<float> dx2;              // [N,C]   gradient at x2 = proj's output gradient
    Buffer<float> dqkv;             // [N,3CL]
    Buffer<float> dln1;             // [N,C]
    Buffer<float> scratch;          // [N,max(C,HL)] dgelu / dattn before they become dfc1 / dqkv
  };
  std::unique_ptr<Slot> make_slot();

  Ops& ops_;
  ModelDims dims_;
  Communicator& tp_;
  Param &ln1_w_, &ln1_b_, &qkv_w_, &qkv_b_, &proj_w_, &proj_b_;
  Param &ln2_w_, &ln2_b_, &fc_w_, &fc_b_, &fc2_w_, &fc2_b_;
  SlotPool<Slot> slots_;
};

}  // namespace pptrain
