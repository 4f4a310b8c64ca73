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
Block<T>::Block(ParamStore& p, const ModelDims& d, int i, Communicator& tp, const Faults& faults,
                const Block* share_scratch_with)
    : Base(p.ops(), d, tp, faults, share_scratch_with),
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
  if (keep_row_partial_ || keep_col_partial_) this->reserve_fault_scratch();
}

template <typename T>
void Gpt2BlockBuffers<T>::Forward::list(const ModelDims& d, SlotBufferVisitor& visit) {
  const size_t n = d.rows(), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  visit(ln1, n * c);
  visit(ln1_mean, n);
  visit(ln1_rstd, n);
  visit(attn, n * cl);
  visit(x2, n * c);
  visit(ln2, n * c);
  visit(ln2_mean, n);
  visit(ln2_rstd, n);
  visit(gelu, n * hl);
}

template <typename T>
void Gpt2BlockBuffers<T>::Gradients::list(const ModelDims& d, SlotBufferVisitor& visit) {
  const size_t n = d.rows(), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  visit(dfc1, n * hl);
  visit(dln2, n * c);
  visit(dx2, n * c);
  visit(dqkv, n * 3 * cl);
  visit(dln1, n * c);
}

template <typename T>
void Gpt2BlockBuffers<T>::Transient::list(const ModelDims& d, SlotBufferVisitor& visit) {
  const size_t n = d.rows(), cl = d.local_channels(), hl = d.local_hidden();
  visit(qkv, n * 3 * cl);
  visit(fc1, n * hl);
  visit(dattn, n * cl);
}

template <typename T>
void Block<T>::tp_sum(T* x, size_t n, bool keep_partial) {
  if (dims_.tp == 1) return;
  if (!keep_partial) {
    tp_.allreduce(x, n, ReduceOp::Sum);
    return;
  }
  ops_.copy(this->fault_scratch(), x, n * sizeof(T));
  tp_.allreduce(this->fault_scratch(), n, ReduceOp::Sum);
}

template <typename T>
void Block<T>::attention_forward(const View& v) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), hd = dims_.head_dim();
  if (dims_.fused_attention)
    ops_.flash_attention_forward(v.f.attn.data(), v.lse.data(), v.t.qkv.data(), b, t, nhl, hd);
  else
    ops_.attention_forward(v.f.attn.data(), v.probs.data(), v.t.qkv.data(), b, t, nhl, hd);
}

template <typename T>
void Block<T>::attention_backward_input(const View& v, const T* dattn) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), hd = dims_.head_dim();
  if (dims_.fused_attention)  // recomputes the probabilities from qkv and lse; reads the output attn
    ops_.flash_attention_backward_input(v.g.dqkv.data(), v.delta.data(), dattn, v.t.qkv.data(), v.f.attn.data(),
                                        v.lse.data(), b, t, nhl, hd);
  else
    ops_.attention_backward_input(v.g.dqkv.data(), dattn, v.t.qkv.data(), v.probs.data(), b, t, nhl, hd);
}

template <typename T>
void Block<T>::run_forward(const View& v, const T* x, T* y) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  // attention half
  ops_.layernorm_forward(v.f.ln1.data(), v.f.ln1_mean.data(), v.f.ln1_rstd.data(), x, weights<T>(ln1_w_),
                         weights<T>(ln1_b_), n, c);
  ops_.linear_forward(v.t.qkv.data(), v.f.ln1.data(), weights<T>(qkv_w_), weights<T>(qkv_b_), n, c, 3 * cl);
  attention_forward(v);
  ops_.linear_forward(v.f.x2.data(), v.f.attn.data(), weights<T>(proj_w_), nullptr, n, cl, c);
  tp_sum(v.f.x2.data(), size_t(n) * c, keep_row_partial_);
  // x2 = (proj_out + proj_b) + x (in place) and ln2 = ln_2(x2) in one pass
  ops_.residual_layernorm_forward(v.f.x2.data(), v.f.ln2.data(), v.f.ln2_mean.data(), v.f.ln2_rstd.data(),
                                  v.f.x2.data(), weights<T>(proj_b_), x, weights<T>(ln2_w_), weights<T>(ln2_b_), n, c);
  // MLP half: fc1 keeps the pre-activation for the GELU's backward, gelu its output for fc2's wgrad
  ops_.linear_gelu_forward(v.f.gelu.data(), v.t.fc1.data(), v.f.ln2.data(), weights<T>(fc_w_), weights<T>(fc_b_), n,
                           c, hl);
  if (!y) return;  // recompute: the output is the stage's already
  if (dims_.tp == 1) {  // y = gelu · fc2ᵀ + fc2_b + x2 in one op (one GEMM on cuda)
    ops_.linear_forward_residual(y, v.f.gelu.data(), weights<T>(fc2_w_), weights<T>(fc2_b_), v.f.x2.data(), n, hl,
                                 c);
    return;
  }
  ops_.linear_forward(y, v.f.gelu.data(), weights<T>(fc2_w_), nullptr, n, hl, c);
  tp_sum(y, size_t(n) * c, keep_row_partial_);
  ops_.add_bias(y, weights<T>(fc2_b_), n, c);
  ops_.add(y, y, v.f.x2.data(), size_t(n) * c);
}

template <typename T>
void Block<T>::run_backward_input(const View& v, const T* x, const T* dy, T* dx) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  // MLP half: dy flows both into the residual (dx2 = dy + ...) and into fc2; through the
  // GELU in the same op: dfc1 = (dy · fc2_w) ∘ gelu'(fc1), kept for fc1's wgrad.
  ops_.linear_backward_input_dgelu(v.g.dfc1.data(), dy, weights<T>(fc2_w_), v.t.fc1.data(), n, hl, c);
  ops_.linear_backward_input(v.g.dln2.data(), v.g.dfc1.data(), weights<T>(fc_w_), n, c, hl, false);
  tp_sum(v.g.dln2.data(), size_t(n) * c, keep_col_partial_);
  // dx2 = dy + ln_2'(dln2): the residual joins in the layernorm dgrad, no copy of dy
  ops_.layernorm_backward_input(v.g.dx2.data(), v.g.dln2.data(), v.f.x2.data(), v.f.ln2_mean.data(),
                                v.f.ln2_rstd.data(), weights<T>(ln2_w_), n, c, dy);
  // attention half
  T* dattn = v.t.dattn.data();  // [N,CL]
  ops_.linear_backward_input(dattn, v.g.dx2.data(), weights<T>(proj_w_), n, cl, c, false);
  attention_backward_input(v, dattn);
  ops_.linear_backward_input(v.g.dln1.data(), v.g.dqkv.data(), weights<T>(qkv_w_), n, c, 3 * cl, false);
  tp_sum(v.g.dln1.data(), size_t(n) * c, keep_col_partial_);
  // dx = dx2 + ln_1'(dln1)
  ops_.layernorm_backward_input(dx, v.g.dln1.data(), x, v.f.ln1_mean.data(), v.f.ln1_rstd.data(),
                                weights<T>(ln1_w_), n, c, v.g.dx2.data());
}

template <typename T>
void Block<T>::run_backward_weight(const Slot& s) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), hl = dims_.local_hidden();
  const Forward& f = s.f;
  const Gradients& g = s.g;
  ops_.linear_backward_weight(fc2_w_.grad.data(), fc2_b_.grad.data(), s.dy, f.gelu.data(), n, hl, c);
  ops_.linear_backward_weight(fc_w_.grad.data(), fc_b_.grad.data(), g.dfc1.data(), f.ln2.data(), n, c, hl);
  ops_.layernorm_backward_weight(ln2_w_.grad.data(), ln2_b_.grad.data(), g.dln2.data(), f.x2.data(),
                                 f.ln2_mean.data(), f.ln2_rstd.data(), n, c);
  ops_.linear_backward_weight(proj_w_.grad.data(), proj_b_.grad.data(), g.dx2.data(), f.attn.data(), n, cl, c);
  ops_.linear_backward_weight(qkv_w_.grad.data(), qkv_b_.grad.data(), g.dqkv.data(), f.ln1.data(), n, c, 3 * cl);
  ops_.layernorm_backward_weight(ln1_w_.grad.data(), ln1_b_.grad.data(), g.dln1.data(), s.x, f.ln1_mean.data(),
                                 f.ln1_rstd.data(), n, c);
}

template struct Gpt2BlockBuffers<float>;
template struct Gpt2BlockBuffers<bfloat16>;
template class Block<float>;
template class Block<bfloat16>;

}  // namespace pptrain
