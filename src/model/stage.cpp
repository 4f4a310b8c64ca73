#include "model/stage.h"

#include "model/block.h"
#include "model/embedding.h"

namespace pptrain {

Stage::Stage(ParamStore& params, const ModelDims& dims, const StageSpec& spec, Communicator& tp)
    : ops_(params.ops()), dims_(dims), spec_(spec) {
  if (spec.has_embedding) layers_.push_back(std::make_unique<Embedding>(params, dims, tp));
  for (int i = 0; i < spec.num_blocks; ++i)
    layers_.push_back(std::make_unique<Block>(params, dims, spec.first_block + i, tp));
  if (spec.has_head) {
    auto head = std::make_unique<Head>(params, dims, tp);
    head_ = head.get();
    layers_.push_back(std::move(head));
  }
}

std::unique_ptr<Stage::Slot> Stage::make_slot() {
  const size_t n = size_t(dims_.rows()) * dims_.d_model;
  const size_t count = layers_.size() + 1;
  auto s = std::make_unique<Slot>();
  s->acts.resize(count);
  s->grads.resize(count);
  for (size_t i = 0; i < count; ++i) {
    bool before_embedding = spec_.has_embedding && i == 0;
    bool after_head = spec_.has_head && i == count - 1;
    if (!before_embedding && !after_head) {
      s->acts[i] = Buffer<float>(ops_, n);
      s->grads[i] = Buffer<float>(ops_, n);
    }
  }
  return s;
}

float* Stage::input(int mb) {
  PPTRAIN_CHECK(!spec_.has_embedding, "the first stage takes tokens, not an input tensor");
  return slots_.acquire(mb, [this] { return make_slot(); }).acts[0].data();
}

void Stage::forward(int mb, const MicrobatchData& data) {
  Slot& s = spec_.has_embedding ? slots_.acquire(mb, [this] { return make_slot(); }) : slots_.get(mb);
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->forward(mb, s.acts[i].data(), s.acts[i + 1].data(), data);
}

const float* Stage::output(int mb) {
  PPTRAIN_CHECK(!spec_.has_head, "the last stage has no output tensor");
  return slots_.get(mb).acts.back().data();
}

float* Stage::output_grad(int mb) {
  PPTRAIN_CHECK(!spec_.has_head, "the last stage starts backward from its loss");
  return slots_.get(mb).grads.back().data();
}

void Stage::backward_input(int mb) {
  Slot& s = slots_.get(mb);
  for (size_t i = layers_.size(); i-- > 0;)
    layers_[i]->backward_input(mb, s.grads[i + 1].data(), s.grads[i].data());
}

const float* Stage::input_grad(int mb) {
  PPTRAIN_CHECK(!spec_.has_embedding, "the first stage has no input gradient");
  return slots_.get(mb).grads[0].data();
}

void Stage::backward_weight(int mb, bool keep_io) {
  slots_.get(mb);  // checks the microbatch is live
  for (size_t i = layers_.size(); i-- > 0;) layers_[i]->backward_weight(mb);
  if (!keep_io) slots_.release(mb);
}

void Stage::release(int mb) { slots_.release(mb); }

void Stage::discard(int mb) {
  slots_.get(mb);
  for (auto& layer : layers_) layer->discard(mb);
  slots_.release(mb);
}

double Stage::loss_sum(int mb) {
  PPTRAIN_CHECK(head_, "loss requested from a stage without the head");
  return head_->loss_sum(mb);
}

const float* Stage::head_dlogits(int mb) {
  PPTRAIN_CHECK(head_, "dlogits requested from a stage without the head");
  return head_->dlogits(mb);
}

void Stage::set_loss_scale(float s) {
  PPTRAIN_CHECK(head_, "loss scale set on a stage without the head");
  head_->set_loss_scale(s);
}

size_t Stage::activation_bytes_per_microbatch() const {
  size_t bytes = 2 * sizeof(float) * size_t(dims_.rows()) * dims_.d_model * (layers_.size() + 1);
  for (auto& l : layers_) bytes += l->slot_bytes();
  return bytes;
}

}  // namespace pptrain
