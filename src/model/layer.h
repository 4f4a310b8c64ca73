// The layer contract (DESIGN.md): forward, backward_input (dgrad, "I") and
// backward_weight (wgrad, "W") over one microbatch. Forward saves what backward needs in
// the microbatch's slot; I keeps what W needs; W accumulates parameter gradients and
// frees the slot. Under training.recompute a block saves less at F and recomputes the
// rest at the start of I (BlockSlotPlacement below). Activations are [N, C] with N = B·T rows of one microbatch. Pointers
// handed to a layer (its input x and output gradient dy) stay valid until its W ran.
// T is the storage type of activations and of the weights the layer computes with: float,
// or bfloat16 under `training.precision: bf16` (fp32 master weights and gradients either way).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "model/dims.h"
#include "model/param.h"

namespace pptrain {

// Token ids of one microbatch, in backend memory: tokens[N] (inputs), targets[N].
struct MicrobatchData {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  // Where the head writes the microbatch's summed loss (one double in backend memory), or
  // null: into its own slot. The executor gathers a step's losses this way and reads them
  // together, without a host wait per microbatch.
  double* loss_sum = nullptr;
};

template <typename T>
class Layer {
 public:
  virtual ~Layer() = default;
  // y[N,C] from x[N,C] (the embedding reads data.tokens instead of x; the head writes
  // no y and keeps the loss instead).
  virtual void forward(int mb, const T* x, T* y, const MicrobatchData& data) = 0;
  // dx[N,C] from dy[N,C] (the head starts from its own loss and ignores dy; the
  // embedding has no input gradient and ignores dx).
  virtual void backward_input(int mb, const T* dy, T* dx) = 0;
  virtual void backward_weight(int mb) = 0;
  // Drops a microbatch's slot without backward (evaluation).
  virtual void discard(int mb) = 0;
  // Bytes held per microbatch between F and W (for the memory report).
  virtual size_t slot_bytes() const = 0;
  // Bytes held per microbatch between I and W: taken by I, freed by W (a block under
  // training.recompute: full, whose I re-runs its forward into them).
  virtual size_t slot_bytes_from_input() const { return 0; }
  // Bytes held once, whatever the microbatches in flight: the scratch the blocks of a stage
  // share under recompute (every block reports the one copy they share).
  virtual size_t scratch_bytes() const { return 0; }
  // The weights its linear ops read in its forward (with `dgrad`: its input gradient), each
  // [out, in] = [local_rows, local_cols] (x·wᵀ forward, dy·w dgrad), in the order the pass
  // reads them: what Stage::prepare_weights asks the backend to prepare. None by default (the
  // embedding gathers rows).
  virtual std::vector<const Param*> linear_weights(bool dgrad) const { return {}; }
};

// A block's buffers fall in four parts by what reads them after F; training.recompute
// decides where each part lives (BlockSlotPlacement; model/block_slots.h keeps them).
enum BlockSlotPart : unsigned {
  kForwardPart = 1,    // F's tensors that W reads too (layer norm outputs and statistics, ...)
  kGradientPart = 2,   // written by I, read by W (each linear layer's output gradient, ...)
  kTransientPart = 4,  // read by I only: F's tensors W does not read, I's own gradients
  kProbsPart = 8,      // naive attention's probabilities [B,NHL,T,T], read by I only
};
inline constexpr unsigned kAllBlockParts = kForwardPart | kGradientPart | kTransientPart | kProbsPart;

// Where a block keeps each part: `at_forward` in a slot per microbatch taken by F, `at_input`
// in one taken by I (both freed by W), `scratch` in one copy the stage's blocks share (they
// run one after another, and nothing in it outlives the pass that writes it).
//   none       every part per microbatch from F to W
//   attention  the probabilities in the scratch: F writes them there, I recomputes them
//   full       F runs entirely in the scratch (only its output, held by the stage, stays);
//              I re-runs the forward into a slot of its own for what W reads, the rest
//              (what only I reads) into the scratch
struct BlockSlotPlacement {
  unsigned at_forward = 0, at_input = 0, scratch = 0;
};
inline BlockSlotPlacement block_slot_placement(Recompute r) {
  switch (r) {
    case Recompute::attention: return {kForwardPart | kGradientPart | kTransientPart, 0, kProbsPart};
    case Recompute::full: return {0, kForwardPart | kGradientPart, kForwardPart | kTransientPart | kProbsPart};
    case Recompute::none: break;
  }
  return {kAllBlockParts, 0, 0};
}

// Per-microbatch activation slots with reuse: a freed slot's buffers serve the next
// microbatch, so steady-state training allocates nothing.
template <typename Slot>
class SlotPool {
 public:
  template <typename Make>
  Slot& acquire(int mb, Make make) {
    PPTRAIN_CHECK(!live_.count(mb), "microbatch ", mb, " already has a slot");
    std::unique_ptr<Slot> s;
    if (!free_.empty()) {
      s = std::move(free_.back());
      free_.pop_back();
    } else {
      s = make();
    }
    Slot& ref = *s;
    live_[mb] = std::move(s);
    return ref;
  }
  Slot& get(int mb) {
    auto it = live_.find(mb);
    PPTRAIN_CHECK(it != live_.end(), "microbatch ", mb, " has no slot (forward not run?)");
    return *it->second;
  }
  void release(int mb) {
    auto it = live_.find(mb);
    PPTRAIN_CHECK(it != live_.end(), "microbatch ", mb, " has no slot to free");
    free_.push_back(std::move(it->second));
    live_.erase(it);
  }
  size_t live() const { return live_.size(); }
  bool holds(int mb) const { return live_.count(mb) != 0; }

 private:
  std::map<int, std::unique_ptr<Slot>> live_;
  std::vector<std::unique_ptr<Slot>> free_;
};

}  // namespace pptrain
