// Stage: a contiguous range of the model's layers that one pipeline action runs as a
// unit. The first stage starts with the embedding, the last ends with the head and loss;
// a single-process model is one stage holding everything. The stage owns the residual-
// stream tensors between its layers, per microbatch, until that microbatch's W ran:
//   acts[i]  [N,C]  input of layer i (acts[0] is the stage input, filled by the caller)
//   grads[i] [N,C]  gradient at acts[i] (grads[L] is the output gradient, filled by the caller)
#pragma once
#include <memory>
#include <vector>

#include "backend/buffer.h"
#include "core/communicator.h"
#include "model/dims.h"
#include "model/head.h"
#include "model/layer.h"
#include "model/param.h"

namespace pptrain {

struct StageSpec {
  int index = 0;        // global stage index, 0 .. pp·v - 1
  int first_block = 0;  // global index of its first transformer block
  int num_blocks = 0;
  bool has_embedding = false;
  bool has_head = false;
};

class Stage {
 public:
  Stage(ParamStore& params, const ModelDims& dims, const StageSpec& spec, Communicator& tp);
  const StageSpec& spec() const { return spec_; }

  // Buffer [N,C] the caller fills with the stage input before forward (not on the first stage).
  float* input(int mb);
  void forward(int mb, const MicrobatchData& data);
  const float* output(int mb);      // [N,C], not on the last stage
  // Buffer [N,C] the caller fills with the output gradient before backward_input (not on the last stage).
  float* output_grad(int mb);
  void backward_input(int mb);
  const float* input_grad(int mb);  // [N,C], not on the first stage
  // Frees the microbatch, unless `keep_io`: then its input/output tensors stay until
  // release() (a non-blocking send may still be reading them).
  void backward_weight(int mb, bool keep_io = false);
  void release(int mb);
  void discard(int mb);             // frees it without backward (evaluation)

  double loss_sum(int mb);          // last stage only, after forward
  void set_loss_scale(float s);     // last stage only
  const float* head_dlogits(int mb);  // last stage only, after forward
  size_t activation_bytes_per_microbatch() const;
  size_t live_microbatches() const { return slots_.live(); }

 private:
  struct Slot {
    std::vector<Buffer<float>> acts, grads;  // L+1 each; unused ends left empty
  };
  std::unique_ptr<Slot> make_slot();

  Ops& ops_;
  ModelDims dims_;
  StageSpec spec_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Head* head_ = nullptr;
  SlotPool<Slot> slots_;
};

}  // namespace pptrain
