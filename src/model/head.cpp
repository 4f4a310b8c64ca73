#include "model/head.h"

#include "model/embedding.h"

namespace pptrain {

Head::Head(ParamStore& p, const ModelDims& d, Communicator& tp)
    : ops_(p.ops()), dims_(d), tp_(tp),
      lnf_w_(p.get_or_create({"ln_f.weight", {d.d_model}, Shard::Replicated, Init::Ones})),
      lnf_b_(p.get_or_create({"ln_f.bias", {d.d_model}, Shard::Replicated, Init::Zeros})),
      wte_(p.get_or_create(token_embedding_spec(d))) {}

std::unique_ptr<Head::Slot> Head::make_slot() {
  const size_t n = dims_.rows(), c = dims_.d_model;
  auto s = std::make_unique<Slot>();
  s->h = Buffer<float>(ops_, n * c);
  s->mean = Buffer<float>(ops_, n);
  s->rstd = Buffer<float>(ops_, n);
  s->logits = Buffer<float>(ops_, n * dims_.local_vocab());
  s->stats = Buffer<float>(ops_, 3 * n);
  s->dh = Buffer<float>(ops_, n * c);
  return s;
}

size_t Head::slot_bytes() const {
  const size_t n = dims_.rows(), c = dims_.d_model;
  return sizeof(float) * (n * c * 2 + n * 5 + n * size_t(dims_.local_vocab()));
}

double Head::logits_and_loss(Slot& s, const float* x, const MicrobatchData& data) {
  const int n = dims_.rows(), c = dims_.d_model, vl = dims_.local_vocab();
  const int valid = dims_.valid_vocab(), v0 = dims_.vocab_offset();
  ops_.layernorm_forward(s.h.data(), s.mean.data(), s.rstd.data(), x, lnf_w_.value.data(),
                         lnf_b_.value.data(), n, c);
  ops_.linear_forward(s.logits.data(), s.h.data(), wte_.value.data(), nullptr, n, c, vl);
  float* rmax = s.stats.data();
  float* sumexp = rmax + n;
  float* target = sumexp + n;
  ops_.ce_row_max(rmax, s.logits.data(), n, vl, valid);
  if (dims_.tp > 1) tp_.allreduce(rmax, size_t(n), ReduceOp::Max);
  ops_.ce_sumexp_target(sumexp, target, s.logits.data(), rmax, data.targets, n, vl, valid, v0);
  if (dims_.tp > 1) tp_.allreduce(sumexp, 2 * size_t(n), ReduceOp::Sum);  // sumexp and target
  return ops_.ce_loss_sum(rmax, sumexp, target, n);
}

void Head::forward(int mb, const float* x, float*, const MicrobatchData& data) {
  Slot& s = slots_.acquire(mb, [this] { return make_slot(); });
  s.x = x;
  s.has_dh = false;
  s.loss_sum = logits_and_loss(s, x, data);
  const int n = dims_.rows();
  const float* rmax = s.stats.data();
  ops_.ce_backward(s.logits.data(), s.logits.data(), rmax, rmax + n, data.targets, n,
                   dims_.local_vocab(), dims_.valid_vocab(), dims_.vocab_offset(), loss_scale_);
}

void Head::backward_input(int mb, const float*, float* dx) {
  const int n = dims_.rows(), c = dims_.d_model, vl = dims_.local_vocab();
  Slot& s = slots_.get(mb);
  ops_.linear_backward_input(s.dh.data(), s.logits.data(), wte_.value.data(), n, c, vl, false);
  if (dims_.tp > 1) tp_.allreduce(s.dh.data(), size_t(n) * c, ReduceOp::Sum);
  ops_.layernorm_backward_input(dx, s.dh.data(), s.x, s.mean.data(), s.rstd.data(),
                                lnf_w_.value.data(), n, c, false);
  s.has_dh = true;
}

void Head::backward_weight(int mb) {
  const int n = dims_.rows(), c = dims_.d_model, vl = dims_.local_vocab();
  Slot& s = slots_.get(mb);
  PPTRAIN_CHECK(s.has_dh, "head W before I for microbatch ", mb);
  ops_.linear_backward_weight(wte_.grad.data(), nullptr, s.logits.data(), s.h.data(), n, c, vl);
  ops_.layernorm_backward_weight(lnf_w_.grad.data(), lnf_b_.grad.data(), s.dh.data(), s.x,
                                 s.mean.data(), s.rstd.data(), n, c);
  slots_.release(mb);
}

}  // namespace pptrain
