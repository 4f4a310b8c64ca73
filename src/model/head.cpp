#include "model/head.h"

#include <type_traits>
#include <vector>

#include "model/embedding.h"

namespace pptrain {

ParamSpec output_embedding_spec(const ModelDims& d) {
  ParamSpec s{"lm_head.weight", {d.vocab_size, d.d_model}, Shard::Rows, Init::Normal, 0.02f, true};
  s.padded_rows = d.padded_vocab();
  return s;
}

template <typename T>
Head<T>::Head(ParamStore& p, const ModelDims& d, Communicator& tp)
    : ops_(p.ops()), dims_(d), tp_(tp),
      lnf_w_(p.get_or_create({"ln_f.weight", {d.d_model}, Shard::Replicated, Init::Ones})),
      lnf_b_(d.llama ? nullptr : &p.get_or_create({"ln_f.bias", {d.d_model}, Shard::Replicated, Init::Zeros})),
      out_(p.get_or_create(d.tie_embeddings ? token_embedding_spec(d) : output_embedding_spec(d))) {}

template <typename T>
std::unique_ptr<typename Head<T>::Slot> Head<T>::make_slot() {
  const size_t n = dims_.rows(), c = dims_.d_model;
  auto s = std::make_unique<Slot>();
  s->h = Buffer<T>(ops_, n * c);
  s->mean = Buffer<float>(ops_, n);
  s->rstd = Buffer<float>(ops_, n);
  s->logits = Buffer<T>(ops_, n * dims_.local_vocab());
  s->stats = Buffer<float>(ops_, 3 * n);
  s->dh = Buffer<T>(ops_, n * c);
  s->loss = Buffer<double>(ops_, 1);
  return s;
}

template <typename T>
size_t Head<T>::slot_bytes() const {
  const size_t n = dims_.rows(), c = dims_.d_model;
  return sizeof(T) * (n * c * 2 + n * size_t(dims_.local_vocab())) + sizeof(float) * n * 5 + sizeof(double);
}

template <typename T>
void Head<T>::final_norm_and_logits(Slot& s, const T* x) {
  const int n = dims_.rows(), c = dims_.d_model, vl = dims_.local_vocab();
  if (dims_.llama)
    ops_.rmsnorm_forward(s.h.data(), s.rstd.data(), x, weights<T>(lnf_w_), n, c, dims_.norm_eps);
  else
    ops_.layernorm_forward(s.h.data(), s.mean.data(), s.rstd.data(), x, weights<T>(lnf_w_),
                           weights<T>(*lnf_b_), n, c);
  ops_.linear_forward(s.logits.data(), s.h.data(), weights<T>(out_), nullptr, n, c, vl);
}

template <typename T>
void Head<T>::logits_and_loss(Slot& s, const T* x, const MicrobatchData& data, double* loss) {
  const int n = dims_.rows(), vl = dims_.local_vocab();
  const int valid = dims_.valid_vocab(), v0 = dims_.vocab_offset();
  final_norm_and_logits(s, x);
  float* rmax = s.stats.data();
  float* sumexp = rmax + n;
  float* target = sumexp + n;
  ops_.ce_row_max(rmax, s.logits.data(), n, vl, valid);
  if (dims_.tp > 1) tp_.allreduce(rmax, size_t(n), ReduceOp::Max);
  ops_.ce_sumexp_target(sumexp, target, s.logits.data(), rmax, data.targets, n, vl, valid, v0);
  if (dims_.tp > 1) tp_.allreduce(sumexp, 2 * size_t(n), ReduceOp::Sum);  // sumexp and target
  ops_.ce_loss_sum(loss, rmax, sumexp, target, n);
}

template <typename T>
void Head<T>::forward(int mb, const T* x, T*, const MicrobatchData& data) {
  Slot& s = slots_.acquire(mb, [this] { return make_slot(); });
  s.x = x;
  s.has_dh = false;
  double* loss = data.loss_sum ? data.loss_sum : s.loss.data();
  s.loss_at = loss;
  const int n = dims_.rows();
  float* rmax = s.stats.data();
  if (dims_.tp == 1) {
    // The whole vocabulary here: statistics and dlogits (over the logits) in one op, the
    // logits read once instead of three times (on GPUs they are the step's largest tensor).
    final_norm_and_logits(s, x);
    ops_.ce_fused(s.logits.data(), rmax, rmax + n, rmax + 2 * n, s.logits.data(), data.targets, n,
                  dims_.local_vocab(), dims_.valid_vocab(), loss_scale_);
    ops_.ce_loss_sum(loss, rmax, rmax + n, rmax + 2 * n, n);
    return;
  }
  logits_and_loss(s, x, data, loss);
  ops_.ce_backward(s.logits.data(), s.logits.data(), rmax, rmax + n, data.targets, n,
                   dims_.local_vocab(), dims_.valid_vocab(), dims_.vocab_offset(), loss_scale_);
}

template <typename T>
double Head<T>::loss_sum(int mb) {
  double host = 0;
  ops_.copy_to_host(&host, slots_.get(mb).loss_at, sizeof(double));
  return host;
}

template <typename T>
void Head<T>::backward_input(int mb, const T*, T* dx) {
  const int n = dims_.rows(), c = dims_.d_model, vl = dims_.local_vocab();
  Slot& s = slots_.get(mb);
  ops_.linear_backward_input(s.dh.data(), s.logits.data(), weights<T>(out_), n, c, vl, false);
  if (dims_.tp > 1) tp_.allreduce(s.dh.data(), size_t(n) * c, ReduceOp::Sum);
  if (dims_.llama)
    ops_.rmsnorm_backward_input(dx, s.dh.data(), s.x, s.rstd.data(), weights<T>(lnf_w_), n, c, nullptr);
  else
    ops_.layernorm_backward_input(dx, s.dh.data(), s.x, s.mean.data(), s.rstd.data(),
                                  weights<T>(lnf_w_), n, c, nullptr);
  s.has_dh = true;
}

template <typename T>
void Head<T>::backward_weight(int mb) {
  const int n = dims_.rows(), c = dims_.d_model, vl = dims_.local_vocab();
  Slot& s = slots_.get(mb);
  PPTRAIN_CHECK(s.has_dh, "head W before I for microbatch ", mb);
  ops_.linear_backward_weight(out_.grad.data(), nullptr, s.logits.data(), s.h.data(), n, c, vl);
  if (dims_.llama)
    ops_.rmsnorm_backward_weight(lnf_w_.grad.data(), s.dh.data(), s.x, s.rstd.data(), n, c);
  else
    ops_.layernorm_backward_weight(lnf_w_.grad.data(), lnf_b_->grad.data(), s.dh.data(), s.x,
                                   s.mean.data(), s.rstd.data(), n, c);
  slots_.release(mb);
}

template <typename T>
void Head<T>::dlogits_row(int mb, int row, float* out) {
  const size_t vl = size_t(dims_.local_vocab());
  std::vector<T> host(vl);  // [VL]
  ops_.copy_to_host(host.data(), slots_.get(mb).logits.data() + size_t(row) * vl, sizeof(T) * vl);
  for (size_t j = 0; j < vl; ++j) {
    if constexpr (std::is_same_v<T, float>) out[j] = host[j];
    else out[j] = host[j].to_float();
  }
}

template class Head<float>;
template class Head<bfloat16>;

}  // namespace pptrain
