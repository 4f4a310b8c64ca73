#include "model/llama_block.h"

#include <type_traits>

namespace pptrain {
namespace {

// Hugging Face's LlamaPreTrainedModel: every linear weight N(0, 0.02), norms at 1.
constexpr float kInitStd = 0.02f;

ParamSpec matrix(const std::string& name, int64_t rows, int64_t cols, Shard shard) {
  return {name, {rows, cols}, shard, Init::Normal, kInitStd, true};
}

ParamSpec gain(const std::string& name, int64_t c) { return {name, {c}, Shard::Replicated, Init::Ones}; }

}  // namespace

ParamSpec llama_qkv_spec(const ModelDims& d, int i) {
  const int64_t q = int64_t(d.n_head) * d.head_dim(), kv = int64_t(d.n_kv_head) * d.head_dim();
  ParamSpec s = matrix(cat("h.", i, ".attn.qkv.weight"), q + 2 * kv, d.d_model, Shard::RowSections);
  s.row_sections = {q, kv, kv};
  return s;
}

ParamSpec llama_qkv_bias_spec(const ModelDims& d, int i) {
  const int64_t q = int64_t(d.n_head) * d.head_dim(), kv = int64_t(d.n_kv_head) * d.head_dim();
  // Sliced with its rows (column-parallel); zeros as transformers initialises a Linear's bias.
  ParamSpec s{cat("h.", i, ".attn.qkv.bias"), {q + 2 * kv}, Shard::RowSections, Init::Zeros};
  s.row_sections = {q, kv, kv};
  return s;
}

template <typename T>
LlamaBlock<T>::LlamaBlock(ParamStore& p, const ModelDims& d, int i, Communicator& tp, const Faults& faults,
                          const LlamaBlock* share_scratch_with)
    : Base(p.ops(), d, tp, faults, share_scratch_with),
      ln1_w_(p.get_or_create(gain(cat("h.", i, ".ln_1.weight"), d.d_model))),
      qkv_w_(p.get_or_create(llama_qkv_spec(d, i))),
      qkv_b_(d.qkv_bias ? &p.get_or_create(llama_qkv_bias_spec(d, i)) : nullptr),
      q_norm_(d.qk_norm ? &p.get_or_create(gain(cat("h.", i, ".attn.q_norm.weight"), d.head_dim())) : nullptr),
      k_norm_(d.qk_norm ? &p.get_or_create(gain(cat("h.", i, ".attn.k_norm.weight"), d.head_dim())) : nullptr),
      proj_w_(p.get_or_create(
          matrix(cat("h.", i, ".attn.proj.weight"), d.d_model, int64_t(d.n_head) * d.head_dim(), Shard::Cols))),
      ln2_w_(p.get_or_create(gain(cat("h.", i, ".ln_2.weight"), d.d_model))),
      gate_w_(p.get_or_create(matrix(cat("h.", i, ".mlp.gate.weight"), d.ffn_hidden, d.d_model, Shard::Rows))),
      up_w_(p.get_or_create(matrix(cat("h.", i, ".mlp.up.weight"), d.ffn_hidden, d.d_model, Shard::Rows))),
      down_w_(p.get_or_create(matrix(cat("h.", i, ".mlp.down.weight"), d.d_model, d.ffn_hidden, Shard::Cols))),
      rope_(rotary_frequencies(d.head_dim(), d.rope_theta, d.rope_scaling)) {
  if (q_norm_ && d.tp > 1) norm_grads_ = Buffer<float>(ops_, 2 * size_t(d.head_dim()));
}

template <typename T>
void LlamaBlockBuffers<T>::Forward::list(const ModelDims& d, SlotBufferVisitor& visit) {
  const size_t n = d.rows(), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  const size_t qn = size_t(d.local_heads()) * d.head_dim(), kn = size_t(d.local_kv_heads()) * d.head_dim();
  visit(ln1, n * c);
  visit(ln1_rstd, n);
  if (d.qk_norm) {
    visit(q_pre, n * qn);
    visit(k_pre, n * kn);
    visit(q_rstd, n * d.local_heads());
    visit(k_rstd, n * d.local_kv_heads());
  }
  visit(attn, n * cl);
  visit(x2, n * c);
  visit(ln2, n * c);
  visit(ln2_rstd, n);
  visit(act, n * hl);
}

template <typename T>
void LlamaBlockBuffers<T>::Gradients::list(const ModelDims& d, SlotBufferVisitor& visit) {
  const size_t n = d.rows(), c = d.d_model, ql = d.local_qkv(), hl = d.local_hidden();
  const size_t qn = size_t(d.local_heads()) * d.head_dim(), kn = size_t(d.local_kv_heads()) * d.head_dim();
  visit(dgate, n * hl);
  visit(dup, n * hl);
  visit(dln2, n * c);
  visit(dx2, n * c);
  visit(dqkv, n * ql);
  if (d.qk_norm) {
    visit(dq_norm, n * qn);
    visit(dk_norm, n * kn);
  }
  visit(dln1, n * c);
}

template <typename T>
void LlamaBlockBuffers<T>::Transient::list(const ModelDims& d, SlotBufferVisitor& visit) {
  const size_t n = d.rows(), cl = d.local_channels(), ql = d.local_qkv(), hl = d.local_hidden();
  const size_t qn = size_t(d.local_heads()) * d.head_dim(), kn = size_t(d.local_kv_heads()) * d.head_dim();
  visit(qkv, n * ql);
  visit(gate, n * hl);
  visit(up, n * hl);
  visit(dact, n * hl);
  visit(dattn, n * cl);
  if (d.qk_norm) {
    visit(q_tmp, n * qn);
    visit(k_tmp, n * kn);
  }
}

template <typename T>
void LlamaBlock<T>::tp_sum(T* x, size_t n) {
  if (dims_.tp > 1) tp_.allreduce(x, n, ReduceOp::Sum);
}

template <typename T>
void LlamaBlock<T>::attention_forward(const View& v) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), kvl = dims_.local_kv_heads();
  const int hd = dims_.head_dim();
  if (dims_.fused_attention)
    ops_.gqa_flash_attention_forward(v.f.attn.data(), v.lse.data(), v.t.qkv.data(), b, t, nhl, kvl, hd);
  else
    ops_.gqa_attention_forward(v.f.attn.data(), v.probs.data(), v.t.qkv.data(), b, t, nhl, kvl, hd);
}

template <typename T>
void LlamaBlock<T>::attention_backward_input(const View& v, const T* dattn) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), kvl = dims_.local_kv_heads();
  const int hd = dims_.head_dim();
  if (dims_.fused_attention)
    ops_.gqa_flash_attention_backward_input(v.g.dqkv.data(), v.delta.data(), dattn, v.t.qkv.data(),
                                            v.f.attn.data(), v.lse.data(), b, t, nhl, kvl, hd);
  else
    ops_.gqa_attention_backward_input(v.g.dqkv.data(), dattn, v.t.qkv.data(), v.probs.data(), b, t, nhl, kvl, hd);
}

// The q heads of every row are the first NHL·HD columns of qkv, the k heads the next KVL·HD:
// copied out, they are [N·NHL, HD] and [N·KVL, HD] rows for the RMSNorm ops, and back.
template <typename T>
void LlamaBlock<T>::qk_norm_forward(const View& v) {
  const int n = dims_.rows(), hd = dims_.head_dim(), ql = dims_.local_qkv();
  const int nhl = dims_.local_heads(), kvl = dims_.local_kv_heads(), qw = nhl * hd, kw = kvl * hd;
  T* qkv = v.t.qkv.data();
  ops_.copy_columns(v.f.q_pre.data(), qkv, n, qw, qw, ql);
  ops_.copy_columns(v.f.k_pre.data(), qkv + qw, n, kw, kw, ql);
  ops_.rmsnorm_forward(v.t.q_tmp.data(), v.f.q_rstd.data(), v.f.q_pre.data(), weights<T>(*q_norm_), n * nhl, hd,
                       dims_.norm_eps);
  ops_.rmsnorm_forward(v.t.k_tmp.data(), v.f.k_rstd.data(), v.f.k_pre.data(), weights<T>(*k_norm_), n * kvl, hd,
                       dims_.norm_eps);
  ops_.copy_columns(qkv, v.t.q_tmp.data(), n, qw, ql, qw);
  ops_.copy_columns(qkv + qw, v.t.k_tmp.data(), n, kw, ql, kw);
}

template <typename T>
void LlamaBlock<T>::qk_norm_backward_input(const View& v) {
  const int n = dims_.rows(), hd = dims_.head_dim(), ql = dims_.local_qkv();
  const int nhl = dims_.local_heads(), kvl = dims_.local_kv_heads(), qw = nhl * hd, kw = kvl * hd;
  T* dqkv = v.g.dqkv.data();
  // The gradient at the norms' outputs, kept for W; their dgrad back into dqkv.
  ops_.copy_columns(v.g.dq_norm.data(), dqkv, n, qw, qw, ql);
  ops_.copy_columns(v.g.dk_norm.data(), dqkv + qw, n, kw, kw, ql);
  ops_.rmsnorm_backward_input(v.t.q_tmp.data(), v.g.dq_norm.data(), v.f.q_pre.data(), v.f.q_rstd.data(),
                              weights<T>(*q_norm_), n * nhl, hd, nullptr);
  ops_.rmsnorm_backward_input(v.t.k_tmp.data(), v.g.dk_norm.data(), v.f.k_pre.data(), v.f.k_rstd.data(),
                              weights<T>(*k_norm_), n * kvl, hd, nullptr);
  ops_.copy_columns(dqkv, v.t.q_tmp.data(), n, qw, ql, qw);
  ops_.copy_columns(dqkv + qw, v.t.k_tmp.data(), n, kw, ql, kw);
}

template <typename T>
void LlamaBlock<T>::qk_norm_backward_weight(const Forward& f, const Gradients& g) {
  const int n = dims_.rows(), hd = dims_.head_dim(), nhl = dims_.local_heads(), kvl = dims_.local_kv_heads();
  // Under tp each rank holds some of the heads: its sums are partial, so this microbatch's
  // are added up over tp (2·HD floats) before they join the gradients.
  const bool partial = dims_.tp > 1;
  if (partial) norm_grads_.zero();
  float* dq = partial ? norm_grads_.data() : q_norm_->grad.data();
  float* dk = partial ? norm_grads_.data() + hd : k_norm_->grad.data();
  ops_.rmsnorm_backward_weight(dq, g.dq_norm.data(), f.q_pre.data(), f.q_rstd.data(), n * nhl, hd);
  ops_.rmsnorm_backward_weight(dk, g.dk_norm.data(), f.k_pre.data(), f.k_rstd.data(), n * kvl, hd);
  if (!partial) return;
  tp_.allreduce(norm_grads_.data(), 2 * size_t(hd), ReduceOp::Sum);
  ops_.accumulate(q_norm_->grad.data(), norm_grads_.data(), size_t(hd));
  ops_.accumulate(k_norm_->grad.data(), norm_grads_.data() + hd, size_t(hd));
}

template <typename T>
void LlamaBlock<T>::run_forward(const View& v, const T* x, T* y) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const int hl = dims_.local_hidden();
  const float eps = dims_.norm_eps;
  // attention half
  ops_.rmsnorm_forward(v.f.ln1.data(), v.f.ln1_rstd.data(), x, weights<T>(ln1_w_), n, c, eps);
  ops_.linear_forward(v.t.qkv.data(), v.f.ln1.data(), weights<T>(qkv_w_), qkv_b_ ? weights<T>(*qkv_b_) : nullptr, n,
                      c, ql);
  if (q_norm_) qk_norm_forward(v);
  ops_.rotary_forward(v.t.qkv.data(), dims_.batch, dims_.seq_len, dims_.local_heads(), dims_.local_kv_heads(),
                      dims_.head_dim(), rope_);
  attention_forward(v);
  // x2 = attn · o_projᵀ + x (one op where tp = 1: one GEMM on cuda)
  if (dims_.tp == 1) {
    ops_.linear_forward_residual(v.f.x2.data(), v.f.attn.data(), weights<T>(proj_w_), nullptr, x, n, cl, c);
  } else {
    ops_.linear_forward(v.f.x2.data(), v.f.attn.data(), weights<T>(proj_w_), nullptr, n, cl, c);
    tp_sum(v.f.x2.data(), size_t(n) * c);
    ops_.add(v.f.x2.data(), v.f.x2.data(), x, size_t(n) * c);
  }
  // MLP half
  ops_.rmsnorm_forward(v.f.ln2.data(), v.f.ln2_rstd.data(), v.f.x2.data(), weights<T>(ln2_w_), n, c, eps);
  ops_.linear_forward(v.t.gate.data(), v.f.ln2.data(), weights<T>(gate_w_), nullptr, n, c, hl);
  ops_.linear_forward(v.t.up.data(), v.f.ln2.data(), weights<T>(up_w_), nullptr, n, c, hl);
  ops_.swiglu_forward(v.f.act.data(), v.t.gate.data(), v.t.up.data(), size_t(n) * hl);
  if (!y) return;  // recompute: the output is the stage's already
  if (dims_.tp == 1) {  // y = act · downᵀ + x2
    ops_.linear_forward_residual(y, v.f.act.data(), weights<T>(down_w_), nullptr, v.f.x2.data(), n, hl, c);
    return;
  }
  ops_.linear_forward(y, v.f.act.data(), weights<T>(down_w_), nullptr, n, hl, c);
  tp_sum(y, size_t(n) * c);
  ops_.add(y, y, v.f.x2.data(), size_t(n) * c);
}

template <typename T>
void LlamaBlock<T>::run_backward_input(const View& v, const T* x, const T* dy, T* dx) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const int hl = dims_.local_hidden();
  // MLP half: dy flows into the residual (dx2 = dy + ...) and into down
  ops_.linear_backward_input(v.t.dact.data(), dy, weights<T>(down_w_), n, hl, c, false);
  ops_.swiglu_backward_input(v.g.dgate.data(), v.g.dup.data(), v.t.dact.data(), v.t.gate.data(), v.t.up.data(),
                             size_t(n) * hl);
  ops_.linear_backward_input(v.g.dln2.data(), v.g.dgate.data(), weights<T>(gate_w_), n, c, hl, false);
  ops_.linear_backward_input(v.g.dln2.data(), v.g.dup.data(), weights<T>(up_w_), n, c, hl, true);
  tp_sum(v.g.dln2.data(), size_t(n) * c);
  // dx2 = dy + rmsnorm_2'(dln2): the residual joins in the norm's dgrad
  ops_.rmsnorm_backward_input(v.g.dx2.data(), v.g.dln2.data(), v.f.x2.data(), v.f.ln2_rstd.data(),
                              weights<T>(ln2_w_), n, c, dy);
  // attention half
  ops_.linear_backward_input(v.t.dattn.data(), v.g.dx2.data(), weights<T>(proj_w_), n, cl, c, false);
  attention_backward_input(v, v.t.dattn.data());
  ops_.rotary_backward_input(v.g.dqkv.data(), dims_.batch, dims_.seq_len, dims_.local_heads(),
                             dims_.local_kv_heads(), dims_.head_dim(), rope_);
  if (q_norm_) qk_norm_backward_input(v);
  ops_.linear_backward_input(v.g.dln1.data(), v.g.dqkv.data(), weights<T>(qkv_w_), n, c, ql, false);
  tp_sum(v.g.dln1.data(), size_t(n) * c);
  // dx = dx2 + rmsnorm_1'(dln1)
  ops_.rmsnorm_backward_input(dx, v.g.dln1.data(), x, v.f.ln1_rstd.data(), weights<T>(ln1_w_), n, c,
                              v.g.dx2.data());
}

template <typename T>
void LlamaBlock<T>::run_backward_weight(const Slot& s) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const int hl = dims_.local_hidden();
  const Forward& f = s.f;
  const Gradients& g = s.g;
  ops_.linear_backward_weight(down_w_.grad.data(), nullptr, s.dy, f.act.data(), n, hl, c);
  ops_.linear_backward_weight(gate_w_.grad.data(), nullptr, g.dgate.data(), f.ln2.data(), n, c, hl);
  ops_.linear_backward_weight(up_w_.grad.data(), nullptr, g.dup.data(), f.ln2.data(), n, c, hl);
  ops_.rmsnorm_backward_weight(ln2_w_.grad.data(), g.dln2.data(), f.x2.data(), f.ln2_rstd.data(), n, c);
  ops_.linear_backward_weight(proj_w_.grad.data(), nullptr, g.dx2.data(), f.attn.data(), n, cl, c);
  ops_.linear_backward_weight(qkv_w_.grad.data(), qkv_b_ ? qkv_b_->grad.data() : nullptr, g.dqkv.data(),
                              f.ln1.data(), n, c, ql);
  ops_.rmsnorm_backward_weight(ln1_w_.grad.data(), g.dln1.data(), s.x, f.ln1_rstd.data(), n, c);
  if (q_norm_) qk_norm_backward_weight(f, g);
}

template struct LlamaBlockBuffers<float>;
template struct LlamaBlockBuffers<bfloat16>;
template class LlamaBlock<float>;
template class LlamaBlock<bfloat16>;

}  // namespace pptrain
