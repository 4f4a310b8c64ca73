// What every transformer block family shares about the buffers it keeps per microbatch: they
// fall in the parts of model/layer.h (BlockSlotPart), training.recompute places each part
// (BlockSlotPlacement) in a slot taken by F, one taken by I, or the scratch the blocks of a
// stage share; slots are reused, I re-runs what the placement dropped, and the memory report
// counts each part where it lives. SlottedBlock does all of that once; a family
// (model/block.h, model/llama_block.h) brings its buffers by part and its passes.
#pragma once
#include <map>
#include <memory>

#include "backend/buffer.h"
#include "core/communicator.h"
#include "core/error.h"
#include "core/faults.h"
#include "model/dims.h"
#include "model/layer.h"

namespace pptrain {

// What a family's buffer list does with each buffer: allocates it on `ops`, or, with no ops,
// only adds up its bytes. Allocating and counting go through the one list, so the memory
// report cannot disagree with what is allocated.
class SlotBufferVisitor {
 public:
  explicit SlotBufferVisitor(Ops* ops) : ops_(ops) {}
  template <typename U>
  void operator()(Buffer<U>& buffer, size_t count) {
    if (ops_) buffer = Buffer<U>(*ops_, count);
    bytes_ += count * sizeof(U);
  }
  size_t bytes() const { return bytes_; }

 private:
  Ops* ops_;
  size_t bytes_ = 0;
};

// The scratch slot the blocks of one stage share (allocated by the first that needs it).
template <typename Slot>
struct SharedScratch {
  std::unique_ptr<Slot> slot;
};

// A block's per-microbatch slots under its BlockSlotPlacement: F takes the slot (at_forward)
// and records the input in it, or, when F keeps nothing (full recompute), only remembers the
// input for I; I then takes the slot (at_input), which the block fills by running its
// forward again; W and discard free it. Slot has members `const T* x` (the block input) and
// `const T* dy` (the output gradient), both owned by the stage; `make(parts)` builds a slot
// holding `parts`.
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

// A transformer block as a Layer, over the buffers `Parts` of its family: the structs
// Parts::Forward, Parts::Gradients and Parts::Transient, one a part (model/layer.h), each of
// Buffer<T> and Buffer<float> members and a member `void list(const ModelDims&,
// SlotBufferVisitor& visit)` that calls visit(buffer, element count) for each of them. F, I
// and W here take and free the microbatch's slot where training.recompute places the parts,
// and I first recomputes what the placement dropped; the family writes its passes over a View.
// Recomputation: the forward of I's recompute runs the family's ops in the same order as F,
// its tp all-reduce included (every tp rank recomputes), so it yields the same bits.
template <typename T, typename Parts>
class SlottedBlock : public Layer<T> {
 public:
  void forward(int mb, const T* x, T* y, const MicrobatchData& data) final;
  void backward_input(int mb, const T* dy, T* dx) final;
  void backward_weight(int mb) final;
  void discard(int mb) final { slots_.discard(mb); }
  size_t slot_bytes() const final { return bytes_of(slots_.placement().at_forward); }
  size_t slot_bytes_from_input() const final { return bytes_of(slots_.placement().at_input); }
  size_t scratch_bytes() const final { return bytes_of(slots_.placement().scratch); }

 protected:
  using Forward = typename Parts::Forward;      // read by I and W
  using Gradients = typename Parts::Gradients;  // kept by I for W
  using Transient = typename Parts::Transient;  // read by I only
  // A microbatch's buffers (or the scratch's), N = B·T, C = d_model, NHL = NH/tp. Besides
  // the family's, what the attention core keeps in every family: the fused kernels' row
  // statistics (transient part) or the naive one's probabilities (probs part).
  struct Slot {
    const T* x = nullptr;      // [N,C]   block input (owned by the stage)
    const T* dy = nullptr;     // [N,C]   output gradient (owned by the stage)
    Forward f;
    Gradients g;
    Transient t;
    Buffer<float> lse, delta;  // [B,NHL,T], [B,NHL,T] fused attention only (fp32 either precision)
    Buffer<T> probs;           // [B,NHL,T,T] naive attention only
  };
  // One pass's buffers, each part from the slot that holds it (a microbatch's or the scratch).
  struct View {
    Forward& f;
    Gradients& g;
    Transient& t;
    Buffer<float>& lse;
    Buffer<float>& delta;
    Buffer<T>& probs;
  };

  // `faults`: the planted faults acting on this rank (skip_recompute; tests only).
  // `share_scratch_with`: an earlier block of the same stage whose recompute scratch this
  // one uses too (null: a scratch of its own).
  SlottedBlock(Ops& ops, const ModelDims& dims, Communicator& tp, const Faults& faults,
               const SlottedBlock* share_scratch_with);

  // The forward from x [N,C] into v; y [N,C] the block output, or null for the recompute of
  // I, which stops before the last projection (its output is the stage's already).
  virtual void run_forward(const View& v, const T* x, T* y) = 0;
  // The attention core alone, from the kept qkv: the probabilities again (attention recompute).
  virtual void attention_forward(const View& v) = 0;
  // I's gradients once v holds the forward: dx [N,C] from dy [N,C], x the block input.
  virtual void run_backward_input(const View& v, const T* x, const T* dy, T* dx) = 0;
  // W's, from the microbatch's slot (its forward and gradient parts, kept in every placement).
  virtual void run_backward_weight(const Slot& s) = 0;

  // [N,C] that a planted fault all-reduces in place of the real tensor, so that the rest of
  // the tp group does not hang: allocated once on request (skip_recompute asks for it here).
  void reserve_fault_scratch();
  T* fault_scratch() { return fault_scratch_.data(); }

  Ops& ops_;
  ModelDims dims_;
  Communicator& tp_;

 private:
  // Calls visit for every buffer of the parts `parts` of s: the family's and the attention core's.
  void list_parts(Slot& s, unsigned parts, SlotBufferVisitor& visit) const;
  std::unique_ptr<Slot> make_slot(unsigned parts);
  size_t bytes_of(unsigned parts) const;
  Slot& scratch();
  // The parts placed per microbatch from `mb_slot` (null: none yet, F under full), the
  // others from the scratch.
  View view(Slot* mb_slot, unsigned mb_parts);

  BlockSlots<Slot, T> slots_;  // a microbatch's slot, taken by F or (full recompute) by I
  std::shared_ptr<SharedScratch<Slot>> scratch_;
  bool skip_recompute_ = false;  // the planted fault skip_recompute
  Buffer<T> fault_scratch_;      // [N,C], only with a fault that needs it
};

template <typename T, typename Parts>
SlottedBlock<T, Parts>::SlottedBlock(Ops& ops, const ModelDims& dims, Communicator& tp, const Faults& faults,
                                     const SlottedBlock* share_scratch_with)
    : ops_(ops), dims_(dims), tp_(tp), slots_(block_slot_placement(dims.recompute)),
      scratch_(share_scratch_with ? share_scratch_with->scratch_ : std::make_shared<SharedScratch<Slot>>()),
      skip_recompute_(faults.find("skip_recompute") != nullptr) {
  if (skip_recompute_) reserve_fault_scratch();
}

template <typename T, typename Parts>
void SlottedBlock<T, Parts>::reserve_fault_scratch() {
  if (fault_scratch_.empty()) fault_scratch_ = Buffer<T>(ops_, size_t(dims_.rows()) * dims_.d_model);
}

template <typename T, typename Parts>
void SlottedBlock<T, Parts>::list_parts(Slot& s, unsigned parts, SlotBufferVisitor& visit) const {
  const size_t t = dims_.seq_len, heads = size_t(dims_.batch) * dims_.local_heads();  // B·NHL
  if (parts & kForwardPart) s.f.list(dims_, visit);
  if (parts & kGradientPart) s.g.list(dims_, visit);
  if (parts & kTransientPart) {
    s.t.list(dims_, visit);
    if (dims_.fused_attention) {
      visit(s.lse, heads * t);
      visit(s.delta, heads * t);
    }
  }
  if ((parts & kProbsPart) && !dims_.fused_attention) visit(s.probs, heads * t * t);
}

template <typename T, typename Parts>
std::unique_ptr<typename SlottedBlock<T, Parts>::Slot> SlottedBlock<T, Parts>::make_slot(unsigned parts) {
  auto s = std::make_unique<Slot>();
  SlotBufferVisitor allocate(&ops_);
  list_parts(*s, parts, allocate);
  return s;
}

template <typename T, typename Parts>
size_t SlottedBlock<T, Parts>::bytes_of(unsigned parts) const {
  Slot empty;  // nothing allocated: only the list of buffers and their sizes is used
  SlotBufferVisitor count(nullptr);
  list_parts(empty, parts, count);
  return count.bytes();
}

template <typename T, typename Parts>
typename SlottedBlock<T, Parts>::Slot& SlottedBlock<T, Parts>::scratch() {
  if (!scratch_->slot) scratch_->slot = make_slot(slots_.placement().scratch);
  return *scratch_->slot;
}

template <typename T, typename Parts>
typename SlottedBlock<T, Parts>::View SlottedBlock<T, Parts>::view(Slot* mb_slot, unsigned mb_parts) {
  Slot& shared = scratch();
  auto from = [&](unsigned part) -> Slot& { return mb_slot && (mb_parts & part) ? *mb_slot : shared; };
  Slot& transient = from(kTransientPart);
  return {from(kForwardPart).f, from(kGradientPart).g, transient.t, transient.lse, transient.delta,
          from(kProbsPart).probs};
}

template <typename T, typename Parts>
void SlottedBlock<T, Parts>::forward(int mb, const T* x, T* y, const MicrobatchData&) {
  // Full recompute: no slot (F runs in the scratch and I runs it again).
  Slot* s = slots_.begin_forward(mb, x, [this](unsigned parts) { return make_slot(parts); });
  run_forward(view(s, slots_.placement().at_forward), x, y);
}

template <typename T, typename Parts>
void SlottedBlock<T, Parts>::backward_input(int mb, const T* dy, T* dx) {
  // Full recompute: this microbatch's slot starts here, filled by the forward again.
  Slot& s = slots_.begin_input(mb, dy, [this](unsigned parts) { return make_slot(parts); });
  const View v = view(&s, slots_.input_parts());
  if (skip_recompute_) {
    // planted fault: I reads whatever the scratch and the slot hold from earlier passes;
    // this rank still joins the recompute's all-reduce (the attention projection's [N,C]),
    // so the rest of the tp group does not hang
    if (slots_.forward_again() && dims_.tp > 1)
      tp_.allreduce(fault_scratch_.data(), size_t(dims_.rows()) * dims_.d_model, ReduceOp::Sum);
  } else if (slots_.forward_again()) {
    run_forward(v, s.x, nullptr);
  } else if (slots_.placement().scratch & kProbsPart) {
    attention_forward(v);  // the probabilities again (and the same attn over the kept one)
  }
  run_backward_input(v, s.x, dy, dx);
}

template <typename T, typename Parts>
void SlottedBlock<T, Parts>::backward_weight(int mb) {
  run_backward_weight(slots_.weight_slot(mb));
  slots_.release(mb);
}

}  // namespace pptrain
