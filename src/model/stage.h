// Stage: a contiguous range of the model's layers that one pipeline action runs as a
// unit. The first stage starts with the embedding, the last ends with the head and loss;
// a single-process model is one stage holding everything. The stage owns the residual-
// stream tensors between its layers, per microbatch, until that microbatch's W ran:
//   acts[i]  [N,C]  input of layer i (acts[0] is the stage input, filled by the caller)
//   grads[i] [N,C]  gradient at acts[i] (grads[L] is the output gradient, filled by the caller)
// Their storage type is the model's precision (fp32, or bf16 with fp32 master weights), so
// the executor sees them as transfer_bytes() of untyped backend memory: it only moves them.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/buffer.h"
#include "core/bf16.h"
#include "core/communicator.h"
#include "core/faults.h"
#include "model/dims.h"
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
  virtual ~Stage() = default;
  virtual const StageSpec& spec() const = 0;
  virtual Precision precision() const = 0;
  // Bytes of one [N,C] tensor passed between stages (activation or its gradient).
  virtual size_t transfer_bytes() const = 0;

  // Buffer [N,C] the caller fills with the stage input before forward (not on the first stage).
  virtual void* input(int mb) = 0;
  virtual void forward(int mb, const MicrobatchData& data) = 0;
  virtual const void* output(int mb) = 0;      // [N,C], not on the last stage
  // Buffer [N,C] the caller fills with the output gradient before backward_input (not on the last stage).
  virtual void* output_grad(int mb) = 0;
  virtual void backward_input(int mb) = 0;
  virtual const void* input_grad(int mb) = 0;  // [N,C], not on the first stage
  // Frees the microbatch, unless `keep_io`: then its input/output tensors stay until
  // release() (a non-blocking send may still be reading them).
  virtual void backward_weight(int mb, bool keep_io = false) = 0;
  // The planted fault drop_microbatch (core/faults.h): frees the microbatch like
  // backward_weight without accumulating its parameter gradients.
  virtual void skip_weight(int mb, bool keep_io) = 0;
  virtual void release(int mb) = 0;
  virtual void discard(int mb) = 0;            // frees it without backward (evaluation)

  // Last stage only, after forward: the microbatch's summed loss, read now (a host wait on
  // a GPU; MicrobatchData::loss_sum gathers it without one).
  virtual double loss_sum(int mb) = 0;
  virtual void set_loss_scale(float s) = 0;    // last stage only
  // Last stage only, after forward: row `row` of dlogits[N,VL] as fp32 into host out[VL].
  virtual void head_dlogits_row(int mb, int row, float* out) = 0;
  virtual size_t activation_bytes_per_microbatch() const = 0;
  // The part of it in the layers' own slots (Layer::slot_bytes), without the stage's [N,C]
  // input/output tensors and their gradients: taken by F, freed by W.
  virtual size_t layer_slot_bytes() const = 0;
  // The part of it taken by I, freed by W (Layer::slot_bytes_from_input: the blocks under
  // training.recompute: full).
  virtual size_t layer_slot_bytes_from_input() const = 0;
  // Bytes held once, not per microbatch: the blocks' shared recompute scratch.
  virtual size_t scratch_bytes() const = 0;
  virtual size_t live_microbatches() const = 0;

  // Asks the backend to prepare, now, the weights this stage's forward (with `dgrad`: its
  // input gradient) will read in the open window (Ops::prepare_linear_weight: where the cpu
  // backend packs them), one weight at a time in the order the pass reads them, from the
  // `from`-th on, while keep_going() says there is time. Returns the index to go on from when
  // keep_going() stopped it, kAllAsked once every weight was asked, kNothingKept where the
  // backend keeps no such copies in this window (nothing to prepare).
  static constexpr int kAllAsked = -1, kNothingKept = -2;
  virtual int prepare_weights(bool dgrad, int from, const std::function<bool()>& keep_going) = 0;
};

// The stage of `spec` with activations and compute weights of `precision` (bf16 needs a
// backend with bf16 ops and current bf16 copies: ParamStore::refresh_stale_bf16 before each
// step; AdamW keeps them current). `faults`: the planted faults acting on this rank (tests
// only).
std::unique_ptr<Stage> make_stage(ParamStore& params, const ModelDims& dims, const StageSpec& spec,
                                  Communicator& tp, Precision precision = Precision::fp32,
                                  const Faults& faults = {});

}  // namespace pptrain
