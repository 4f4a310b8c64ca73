#include "model/block.h"

#include <cmath>
#include <type_traits>

namespace pptrain {
namespace {

ParamSpec spec(const std::string& name, std::vector<int64_t> shape, Shard shard, Init init,
               float std = 0.0f, bool decay = false) {
  return {name, std::move(shape), shard, init, std, decay};
}

}  // namespace

template <typename T>
Block<T>::Block(ParamStore& p, const ModelDims& d, int i, Communicator& tp, const Faults& faults)
    : ops_(p.ops()), dims_(d), tp_(tp),
      ln1_w_(p.get_or_create(spec(cat("h.", i, ".ln_1.weight"), {d.d_model}, Shard::Replicated, Init::Ones))),
      ln1_b_(p.get_or_create(spec(cat("h.", i, ".ln_1.bias"), {d.d_model}, Shard::Replicated, Init::Zeros))),
      qkv_w_(p.get_or_create(spec(cat("h.", i, ".attn.qkv.weight"), {3 * d.d_model, d.d_model}, Shard::Rows3,
                                  Init::Normal, 0.02f, true))),
      qkv_b_(p.get_or_create(spec(cat("h.", i, ".attn.qkv.bias"), {3 * d.d_model}, Shard::Rows3, Init::Zeros))),
      // GPT-2: residual projections scaled by 1/sqrt(2·n_layer).
      proj_w_(p.get_or_create(spec(cat("h.", i, ".attn.proj.weight"), {d.d_model, d.d_model}, Shard::Cols,
                                   Init::Normal, 0.02f / std::sqrt(2.0f * d.n_layer), true))),
      proj_b_(p.get_or_create(spec(cat("h.", i, ".attn.proj.bias"), {d.d_model}, Shard::Replicated, Init::Zeros))),
      ln2_w_(p.get_or_create(spec(cat("h.", i, ".ln_2.weight"), {d.d_model}, Shard::Replicated, Init::Ones))),
      ln2_b_(p.get_or_create(spec(cat("h.", i, ".ln_2.bias"), {d.d_model}, Shard::Replicated, Init::Zeros))),
      fc_w_(p.get_or_create(spec(cat("h.", i, ".mlp.fc.weight"), {4 * d.d_model, d.d_model}, Shard::Rows,
                                 Init::Normal, 0.02f, true))),
      fc_b_(p.get_or_create(spec(cat("h.", i, ".mlp.fc.bias"), {4 * d.d_model}, Shard::Rows, Init::Zeros))),
      fc2_w_(p.get_or_create(spec(cat("h.", i, ".mlp.proj.weight"), {d.d_model, 4 * d.d_model}, Shard::Cols,
                                  Init::Normal, 0.02f / std::sqrt(2.0f * d.n_layer), true))),
      fc2_b_(p.get_or_create(spec(cat("h.", i, ".mlp.proj.bias"), {d.d_model}, Shard::Replicated, Init::Zeros))) {
  for (const Fault* f : faults.find_all("skip_tp_allreduce"))  // target row or col (checked by the parser)
    (f->target == "row" ? keep_row_partial_ : keep_col_partial_) = true;
  if (keep_row_partial_ || keep_col_partial_) fault_scratch_ = Buffer<T>(ops_, size_t(d.rows()) * d.d_model);
}

template <typename T>
void Block<T>::tp_sum(T* x, size_t n, bool keep_partial) {
  if (dims_.tp == 1) return;
  if (!keep_partial) {
    tp_.allreduce(x, n, ReduceOp::Sum);
    return;
  }
  ops_.copy(fault_scratch_.data(), x, n * sizeof(T));
  tp_.allreduce(fault_scratch_.data(), n, ReduceOp::Sum);
}

template <typename T>
template <typename Visit>
void Block<T>::for_each_buffer(Slot& s, Visit&& visit) const {
  const size_t n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  const size_t t = dims_.seq_len;
  visit(s.ln1, n * c);
  visit(s.ln1_mean, n);
  visit(s.ln1_rstd, n);
  visit(s.qkv, n * 3 * cl);
  const size_t heads = size_t(dims_.batch) * dims_.local_heads();  // B·NHL
  if (dims_.fused_attention) {
    visit(s.lse, heads * t);
    visit(s.delta, heads * t);
  } else {
    visit(s.probs, heads * t * t);
  }
  visit(s.attn, n * cl);
  visit(s.x2, n * c);
  visit(s.ln2, n * c);
  visit(s.ln2_mean, n);
  visit(s.ln2_rstd, n);
  visit(s.fc1, n * hl);
  visit(s.gelu, n * hl);
  visit(s.dfc1, n * hl);
  visit(s.dln2, n * c);
  visit(s.dx2, n * c);
  visit(s.dqkv, n * 3 * cl);
  visit(s.dln1, n * c);
  visit(s.dattn, n * cl);
}

template <typename T>
std::unique_ptr<typename Block<T>::Slot> Block<T>::make_slot() {
  return allocate_slot<Slot>(ops_, [this](Slot& s, auto&& visit) { for_each_buffer(s, visit); });
}

template <typename T>
size_t Block<T>::slot_bytes() const {
  return slot_bytes_of<Slot>([this](Slot& s, auto&& visit) { for_each_buffer(s, visit); });
}

template <typename T>
void Block<T>::attention_forward(Slot& s) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), hd = dims_.head_dim();
  if (dims_.fused_attention)
    ops_.flash_attention_forward(s.attn.data(), s.lse.data(), s.qkv.data(), b, t, nhl, hd);
  else
    ops_.attention_forward(s.attn.data(), s.probs.data(), s.qkv.data(), b, t, nhl, hd);
}

template <typename T>
void Block<T>::attention_backward_input(Slot& s, const T* dattn) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), hd = dims_.head_dim();
  if (dims_.fused_attention)  // recomputes the probabilities from qkv and lse; reads the output s.attn
    ops_.flash_attention_backward_input(s.dqkv.data(), s.delta.data(), dattn, s.qkv.data(), s.attn.data(),
                                        s.lse.data(), b, t, nhl, hd);
  else
    ops_.attention_backward_input(s.dqkv.data(), dattn, s.qkv.data(), s.probs.data(), b, t, nhl, hd);
}

template <typename T>
void Block<T>::forward(int mb, const T* x, T* y, const MicrobatchData&) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  Slot& s = slots_.acquire(mb, [this] { return make_slot(); });
  s.x = x;
  s.dy = nullptr;
  // attention half
  ops_.layernorm_forward(s.ln1.data(), s.ln1_mean.data(), s.ln1_rstd.data(), x, weights<T>(ln1_w_),
                         weights<T>(ln1_b_), n, c);
  ops_.linear_forward(s.qkv.data(), s.ln1.data(), weights<T>(qkv_w_), weights<T>(qkv_b_), n, c, 3 * cl);
  attention_forward(s);
  ops_.linear_forward(s.x2.data(), s.attn.data(), weights<T>(proj_w_), nullptr, n, cl, c);
  tp_sum(s.x2.data(), size_t(n) * c, keep_row_partial_);
  // x2 = (proj_out + proj_b) + x (in place) and ln2 = ln_2(x2) in one pass
  ops_.residual_layernorm_forward(s.x2.data(), s.ln2.data(), s.ln2_mean.data(), s.ln2_rstd.data(), s.x2.data(),
                                  weights<T>(proj_b_), x, weights<T>(ln2_w_), weights<T>(ln2_b_), n, c);
  // MLP half: fc1 keeps the pre-activation for the GELU's backward, gelu its output for fc2's wgrad
  ops_.linear_gelu_forward(s.gelu.data(), s.fc1.data(), s.ln2.data(), weights<T>(fc_w_), weights<T>(fc_b_), n, c,
                           hl);
  ops_.linear_forward(y, s.gelu.data(), weights<T>(fc2_w_), nullptr, n, hl, c);
  tp_sum(y, size_t(n) * c, keep_row_partial_);
  ops_.add_bias(y, weights<T>(fc2_b_), n, c);
  ops_.add(y, y, s.x2.data(), size_t(n) * c);
}

template <typename T>
void Block<T>::backward_input(int mb, const T* dy, T* dx) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  Slot& s = slots_.get(mb);
  s.dy = dy;
  // MLP half: dy flows both into the residual (dx2 = dy + ...) and into fc2; through the
  // GELU in the same op: dfc1 = (dy · fc2_w) ∘ gelu'(fc1), kept for fc1's wgrad.
  ops_.linear_backward_input_dgelu(s.dfc1.data(), dy, weights<T>(fc2_w_), s.fc1.data(), n, hl, c);
  ops_.linear_backward_input(s.dln2.data(), s.dfc1.data(), weights<T>(fc_w_), n, c, hl, false);
  tp_sum(s.dln2.data(), size_t(n) * c, keep_col_partial_);
  // dx2 = dy + ln_2'(dln2): the residual joins in the layernorm dgrad, no copy of dy
  ops_.layernorm_backward_input(s.dx2.data(), s.dln2.data(), s.x2.data(), s.ln2_mean.data(),
                                s.ln2_rstd.data(), weights<T>(ln2_w_), n, c, dy);
  // attention half
  T* dattn = s.dattn.data();  // [N,CL]
  ops_.linear_backward_input(dattn, s.dx2.data(), weights<T>(proj_w_), n, cl, c, false);
  attention_backward_input(s, dattn);
  ops_.linear_backward_input(s.dln1.data(), s.dqkv.data(), weights<T>(qkv_w_), n, c, 3 * cl, false);
  tp_sum(s.dln1.data(), size_t(n) * c, keep_col_partial_);
  // dx = dx2 + ln_1'(dln1)
  ops_.layernorm_backward_input(dx, s.dln1.data(), s.x, s.ln1_mean.data(), s.ln1_rstd.data(),
                                weights<T>(ln1_w_), n, c, s.dx2.data());
}

template <typename T>
void Block<T>::backward_weight(int mb) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  Slot& s = slots_.get(mb);
  PPTRAIN_CHECK(s.dy, "block W before I for microbatch ", mb);
  ops_.linear_backward_weight(fc2_w_.grad.data(), fc2_b_.grad.data(), s.dy, s.gelu.data(), n, hl, c);
  ops_.linear_backward_weight(fc_w_.grad.data(), fc_b_.grad.data(), s.dfc1.data(), s.ln2.data(), n, c, hl);
  ops_.layernorm_backward_weight(ln2_w_.grad.data(), ln2_b_.grad.data(), s.dln2.data(), s.x2.data(),
                                 s.ln2_mean.data(), s.ln2_rstd.data(), n, c);
  ops_.linear_backward_weight(proj_w_.grad.data(), proj_b_.grad.data(), s.dx2.data(), s.attn.data(), n, cl, c);
  ops_.linear_backward_weight(qkv_w_.grad.data(), qkv_b_.grad.data(), s.dqkv.data(), s.ln1.data(), n, c, 3 * cl);
  ops_.layernorm_backward_weight(ln1_w_.grad.data(), ln1_b_.grad.data(), s.dln1.data(), s.x,
                                 s.ln1_mean.data(), s.ln1_rstd.data(), n, c);
  slots_.release(mb);
}

template class Block<float>;
template class Block<bfloat16>;

}  // namespace pptrain
