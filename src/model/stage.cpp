#include "model/stage.h"

#include <algorithm>

#include "model/block.h"
#include "model/embedding.h"
#include "model/head.h"
#include "model/llama_block.h"

namespace pptrain {
namespace {

// The stage over activations of storage type T (float or bfloat16).
template <typename T>
class TypedStage final : public Stage {
 public:
  TypedStage(ParamStore& params, const ModelDims& dims, const StageSpec& spec, Communicator& tp,
             const Faults& faults)
      : ops_(params.ops()), dims_(dims), spec_(spec) {
    if (spec.has_embedding) layers_.push_back(std::make_unique<Embedding<T>>(params, dims, tp));
    // The blocks run one after another, so they share one recompute scratch (the first's).
    LlamaBlock<T>* first_llama = nullptr;
    Block<T>* first_gpt2 = nullptr;
    for (int i = 0; i < spec.num_blocks; ++i) {
      if (dims.llama) {
        auto block = std::make_unique<LlamaBlock<T>>(params, dims, spec.first_block + i, tp, faults, first_llama);
        if (!first_llama) first_llama = block.get();
        layers_.push_back(std::move(block));
      } else {
        auto block = std::make_unique<Block<T>>(params, dims, spec.first_block + i, tp, faults, first_gpt2);
        if (!first_gpt2) first_gpt2 = block.get();
        layers_.push_back(std::move(block));
      }
    }
    if (spec.has_head) {
      auto head = std::make_unique<Head<T>>(params, dims, tp);
      head_ = head.get();
      layers_.push_back(std::move(head));
    }
  }

  const StageSpec& spec() const override { return spec_; }
  Precision precision() const override {
    return std::is_same_v<T, float> ? Precision::fp32 : Precision::bf16;
  }
  size_t transfer_bytes() const override { return sizeof(T) * size_t(dims_.rows()) * dims_.d_model; }

  void* input(int mb) override {
    PPTRAIN_CHECK(!spec_.has_embedding, "the first stage takes tokens, not an input tensor");
    return slots_.acquire(mb, [this] { return make_slot(); }).acts[0].data();
  }

  void forward(int mb, const MicrobatchData& data) override {
    Slot& s = spec_.has_embedding ? slots_.acquire(mb, [this] { return make_slot(); }) : slots_.get(mb);
    for (size_t i = 0; i < layers_.size(); ++i)
      layers_[i]->forward(mb, s.acts[i].data(), s.acts[i + 1].data(), data);
  }

  const void* output(int mb) override {
    PPTRAIN_CHECK(!spec_.has_head, "the last stage has no output tensor");
    return slots_.get(mb).acts.back().data();
  }

  void* output_grad(int mb) override {
    PPTRAIN_CHECK(!spec_.has_head, "the last stage starts backward from its loss");
    return slots_.get(mb).grads.back().data();
  }

  void backward_input(int mb) override {
    Slot& s = slots_.get(mb);
    for (size_t i = layers_.size(); i-- > 0;)
      layers_[i]->backward_input(mb, s.grads[i + 1].data(), s.grads[i].data());
  }

  const void* input_grad(int mb) override {
    PPTRAIN_CHECK(!spec_.has_embedding, "the first stage has no input gradient");
    return slots_.get(mb).grads[0].data();
  }

  void backward_weight(int mb, bool keep_io) override {
    slots_.get(mb);  // checks the microbatch is live
    for (size_t i = layers_.size(); i-- > 0;) layers_[i]->backward_weight(mb);
    if (!keep_io) slots_.release(mb);
  }

  void skip_weight(int mb, bool keep_io) override {
    slots_.get(mb);
    for (auto& layer : layers_) layer->discard(mb);
    if (!keep_io) slots_.release(mb);
  }

  void release(int mb) override { slots_.release(mb); }

  void discard(int mb) override {
    slots_.get(mb);
    for (auto& layer : layers_) layer->discard(mb);
    slots_.release(mb);
  }

  double loss_sum(int mb) override { return head().loss_sum(mb); }
  void set_loss_scale(float s) override { head().set_loss_scale(s); }
  void head_dlogits_row(int mb, int row, float* out) override { head().dlogits_row(mb, row, out); }

  size_t activation_bytes_per_microbatch() const override {
    return 2 * transfer_bytes() * (layers_.size() + 1) + layer_slot_bytes() + layer_slot_bytes_from_input();
  }
  size_t layer_slot_bytes() const override {
    size_t bytes = 0;
    for (auto& l : layers_) bytes += l->slot_bytes();
    return bytes;
  }
  size_t layer_slot_bytes_from_input() const override {
    size_t bytes = 0;
    for (auto& l : layers_) bytes += l->slot_bytes_from_input();
    return bytes;
  }
  size_t scratch_bytes() const override {
    // One scratch shared by the blocks (each reports it), none for the embedding and head.
    size_t bytes = 0;
    for (auto& l : layers_) bytes = std::max(bytes, l->scratch_bytes());
    return bytes;
  }
  size_t live_microbatches() const override { return slots_.live(); }

  int prepare_weights(bool dgrad, int from, const std::function<bool()>& keep_going) override {
    std::vector<const Param*> order;  // I runs the layers backwards
    for (size_t l = 0; l < layers_.size(); ++l)
      for (const Param* w : layers_[dgrad ? layers_.size() - 1 - l : l]->linear_weights(dgrad)) order.push_back(w);
    for (int i = std::max(from, 0); i < int(order.size()); ++i) {
      if (!keep_going()) return i;
      const Param& w = *order[i];
      if (!ops_.prepare_linear_weight(weights<T>(w), dims_.rows(), int(w.local_cols), int(w.local_rows), dgrad))
        return kNothingKept;
    }
    return kAllAsked;
  }

 private:
  struct Slot {
    std::vector<Buffer<T>> acts, grads;  // L+1 each; unused ends left empty
  };

  std::unique_ptr<Slot> make_slot() {
    const size_t n = size_t(dims_.rows()) * dims_.d_model;
    const size_t count = layers_.size() + 1;
    auto s = std::make_unique<Slot>();
    s->acts.resize(count);
    s->grads.resize(count);
    for (size_t i = 0; i < count; ++i) {
      bool before_embedding = spec_.has_embedding && i == 0;
      bool after_head = spec_.has_head && i == count - 1;
      if (!before_embedding && !after_head) {
        s->acts[i] = Buffer<T>(ops_, n);
        s->grads[i] = Buffer<T>(ops_, n);
      }
    }
    return s;
  }

  Head<T>& head() {
    PPTRAIN_CHECK(head_, "stage ", spec_.index, " has no head (loss, loss scale and dlogits live on the last stage)");
    return *head_;
  }

  Ops& ops_;
  ModelDims dims_;
  StageSpec spec_;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  Head<T>* head_ = nullptr;
  SlotPool<Slot> slots_;
};

}  // namespace

std::unique_ptr<Stage> make_stage(ParamStore& params, const ModelDims& dims, const StageSpec& spec,
                                  Communicator& tp, Precision precision, const Faults& faults) {
  if (precision == Precision::bf16) return std::make_unique<TypedStage<bfloat16>>(params, dims, spec, tp, faults);
  return std::make_unique<TypedStage<float>>(params, dims, spec, tp, faults);
}

}  // namespace pptrain
