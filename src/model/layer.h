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

namespace pptrain {

// Token ids of one microbatch, in backend memory: tokens[N] (inputs), targets[N].
struct MicrobatchData {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
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
};

// A block's buffers fall in four parts by what reads them after F; training.recompute
// decides where each part lives (BlockSlotPlacement).
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

// The scratch slot the blocks of one stage share (allocated by the first that needs it).
template <typename Slot>
struct SharedScratch {
  std::unique_ptr<Slot> slot;
};

// A slot's buffers from one list: `for_each_buffer(slot, visit)` calls visit(buffer,
// element count) for every buffer of the slot, so allocating them and adding up their
// bytes cannot disagree. Buffers are Buffer<U> of the backend `ops`.
template <typename Slot, typename ForEachBuffer>
std::unique_ptr<Slot> allocate_slot(Ops& ops, ForEachBuffer&& for_each_buffer) {
  auto s = std::make_unique<Slot>();
  for_each_buffer(*s, [&ops](auto& buffer, size_t count) {
    buffer = std::remove_reference_t<decltype(buffer)>(ops, count);
  });
  return s;
}
template <typename Slot, typename ForEachBuffer>
size_t slot_bytes_of(ForEachBuffer&& for_each_buffer) {
  Slot empty;  // nothing allocated: only the list of buffers and their sizes is used
  size_t bytes = 0;
  for_each_buffer(empty, [&bytes](auto& buffer, size_t count) { bytes += count * sizeof(*buffer.data()); });
  return bytes;
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

// A block's per-microbatch slots under its BlockSlotPlacement, the lifecycle both model
// families share: F takes the slot (at_forward) and records the input in it, or, when F keeps
// nothing (full recompute), only remembers the input for I; I then takes the slot
// (at_input), which the block fills by running its forward again; W and discard free it.
// Slot has members `const T* x` (the block input) and `const T* dy` (the output gradient),
// both owned by the stage; `make(parts)` builds a slot holding `parts`.
template <typename Slot, typename T>
class BlockSlots {
 public:
  explicit BlockSlots(BlockSlotPlacement placement) : placement_(placement) {}
  const BlockSlotPlacement& placement() const { return placement_; }
  // The parts a microbatch's slot holds during I and W.
  unsigned input_parts() const { return placement_.at_input ? placement_.at_input : placement_.at_forward; }
  // I re-runs the forward into the slot it takes (full recompute).
  bool forward_again() const { return placement_.at_input != 0; }

  // F: the microbatch's slot, or nullptr when F keeps nothing (F then runs in the scratch).
  template <typename Make>
  Slot* begin_forward(int mb, const T* x, Make make) {
    if (placement_.at_forward == 0) {
      PPTRAIN_CHECK(!inputs_.count(mb) && !slots_.holds(mb), "microbatch ", mb, " already ran forward");
      inputs_[mb] = x;
      return nullptr;
    }
    Slot& s = slots_.acquire(mb, [&] { return make(placement_.at_forward); });
    s.x = x;
    s.dy = nullptr;
    return &s;
  }
  // I: the microbatch's slot with dy recorded; taken here (holding at_input) under full
  // recompute, where the caller must run the forward into it before the dgrad.
  template <typename Make>
  Slot& begin_input(int mb, const T* dy, Make make) {
    Slot* s = nullptr;
    if (forward_again()) {
      auto it = inputs_.find(mb);
      PPTRAIN_CHECK(it != inputs_.end(), "block I before F for microbatch ", mb);
      s = &slots_.acquire(mb, [&] { return make(placement_.at_input); });
      s->x = it->second;
      inputs_.erase(it);
    } else {
      s = &slots_.get(mb);
    }
    s->dy = dy;
    return *s;
  }
  // W: the slot I left, checked to have run.
  Slot& weight_slot(int mb) {
    Slot& s = slots_.get(mb);
    PPTRAIN_CHECK(s.dy, "block W before I for microbatch ", mb);
    return s;
  }
  void release(int mb) { slots_.release(mb); }
  // Evaluation: drops the microbatch whatever it holds.
  void discard(int mb) {
    inputs_.erase(mb);
    if (slots_.holds(mb)) slots_.release(mb);
  }

 private:
  BlockSlotPlacement placement_;
  SlotPool<Slot> slots_;            // taken by F (at_forward) or by I (at_input), freed by W
  std::map<int, const T*> inputs_;  // x of the microbatches F ran and I did not yet (full)
};

}  // namespace pptrain
