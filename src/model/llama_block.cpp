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

template <typename T>
LlamaBlock<T>::LlamaBlock(ParamStore& p, const ModelDims& d, int i, Communicator& tp)
    : ops_(p.ops()), dims_(d), tp_(tp),
      ln1_w_(p.get_or_create(gain(cat("h.", i, ".ln_1.weight"), d.d_model))),
      qkv_w_(p.get_or_create(llama_qkv_spec(d, i))),
      proj_w_(p.get_or_create(matrix(cat("h.", i, ".attn.proj.weight"), d.d_model, d.d_model, Shard::Cols))),
      ln2_w_(p.get_or_create(gain(cat("h.", i, ".ln_2.weight"), d.d_model))),
      gate_w_(p.get_or_create(matrix(cat("h.", i, ".mlp.gate.weight"), d.ffn_hidden, d.d_model, Shard::Rows))),
      up_w_(p.get_or_create(matrix(cat("h.", i, ".mlp.up.weight"), d.ffn_hidden, d.d_model, Shard::Rows))),
      down_w_(p.get_or_create(matrix(cat("h.", i, ".mlp.down.weight"), d.d_model, d.ffn_hidden, Shard::Cols))) {}

template <typename T>
void LlamaBlock<T>::tp_sum(T* x, size_t n) {
  if (dims_.tp > 1) tp_.allreduce(x, n, ReduceOp::Sum);
}

template <typename T>
template <typename Visit>
void LlamaBlock<T>::for_each_buffer(Slot& s, Visit&& visit) const {
  const size_t n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const size_t hl = dims_.local_hidden(), t = dims_.seq_len;
  const size_t heads = size_t(dims_.batch) * dims_.local_heads();  // B·NHL
  visit(s.ln1, n * c);
  visit(s.ln1_rstd, n);
  visit(s.qkv, n * ql);
  if (dims_.fused_attention) {
    visit(s.lse, heads * t);
    visit(s.delta, heads * t);
  } else {
    visit(s.probs, heads * t * t);
  }
  visit(s.attn, n * cl);
  visit(s.x2, n * c);
  visit(s.ln2, n * c);
  visit(s.ln2_rstd, n);
  visit(s.gate, n * hl);
  visit(s.up, n * hl);
  visit(s.act, n * hl);
  visit(s.dgate, n * hl);
  visit(s.dup, n * hl);
  visit(s.dln2, n * c);
  visit(s.dx2, n * c);
  visit(s.dqkv, n * ql);
  visit(s.dln1, n * c);
  visit(s.dact, n * hl);
  visit(s.dattn, n * cl);
}

template <typename T>
std::unique_ptr<typename LlamaBlock<T>::Slot> LlamaBlock<T>::make_slot() {
  return allocate_slot<Slot>(ops_, [this](Slot& s, auto&& visit) { for_each_buffer(s, visit); });
}

template <typename T>
size_t LlamaBlock<T>::slot_bytes() const {
  return slot_bytes_of<Slot>([this](Slot& s, auto&& visit) { for_each_buffer(s, visit); });
}

template <typename T>
void LlamaBlock<T>::attention_forward(Slot& s) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), kvl = dims_.local_kv_heads();
  const int hd = dims_.head_dim();
  if (dims_.fused_attention)
    ops_.gqa_flash_attention_forward(s.attn.data(), s.lse.data(), s.qkv.data(), b, t, nhl, kvl, hd);
  else
    ops_.gqa_attention_forward(s.attn.data(), s.probs.data(), s.qkv.data(), b, t, nhl, kvl, hd);
}

template <typename T>
void LlamaBlock<T>::attention_backward_input(Slot& s, const T* dattn) {
  const int b = dims_.batch, t = dims_.seq_len, nhl = dims_.local_heads(), kvl = dims_.local_kv_heads();
  const int hd = dims_.head_dim();
  if (dims_.fused_attention)
    ops_.gqa_flash_attention_backward_input(s.dqkv.data(), s.delta.data(), dattn, s.qkv.data(), s.attn.data(),
                                            s.lse.data(), b, t, nhl, kvl, hd);
  else
    ops_.gqa_attention_backward_input(s.dqkv.data(), dattn, s.qkv.data(), s.probs.data(), b, t, nhl, kvl, hd);
}

template <typename T>
void LlamaBlock<T>::forward(int mb, const T* x, T* y, const MicrobatchData&) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const int hl = dims_.local_hidden();
  const float eps = dims_.norm_eps;
  Slot& s = slots_.acquire(mb, [this] { return make_slot(); });
  s.x = x;
  s.dy = nullptr;
  // attention half
  ops_.rmsnorm_forward(s.ln1.data(), s.ln1_rstd.data(), x, weights<T>(ln1_w_), n, c, eps);
  ops_.linear_forward(s.qkv.data(), s.ln1.data(), weights<T>(qkv_w_), nullptr, n, c, ql);
  ops_.rotary_forward(s.qkv.data(), dims_.batch, dims_.seq_len, dims_.local_heads(), dims_.local_kv_heads(),
                      dims_.head_dim(), dims_.rope_theta);
  attention_forward(s);
  ops_.linear_forward(s.x2.data(), s.attn.data(), weights<T>(proj_w_), nullptr, n, cl, c);
  tp_sum(s.x2.data(), size_t(n) * c);
  ops_.add(s.x2.data(), s.x2.data(), x, size_t(n) * c);
  // MLP half
  ops_.rmsnorm_forward(s.ln2.data(), s.ln2_rstd.data(), s.x2.data(), weights<T>(ln2_w_), n, c, eps);
  ops_.linear_forward(s.gate.data(), s.ln2.data(), weights<T>(gate_w_), nullptr, n, c, hl);
  ops_.linear_forward(s.up.data(), s.ln2.data(), weights<T>(up_w_), nullptr, n, c, hl);
  ops_.swiglu_forward(s.act.data(), s.gate.data(), s.up.data(), size_t(n) * hl);
  ops_.linear_forward(y, s.act.data(), weights<T>(down_w_), nullptr, n, hl, c);
  tp_sum(y, size_t(n) * c);
  ops_.add(y, y, s.x2.data(), size_t(n) * c);
}

template <typename T>
void LlamaBlock<T>::backward_input(int mb, const T* dy, T* dx) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const int hl = dims_.local_hidden();
  Slot& s = slots_.get(mb);
  s.dy = dy;
  // MLP half: dy flows into the residual (dx2 = dy + ...) and into down
  ops_.linear_backward_input(s.dact.data(), dy, weights<T>(down_w_), n, hl, c, false);
  ops_.swiglu_backward_input(s.dgate.data(), s.dup.data(), s.dact.data(), s.gate.data(), s.up.data(), size_t(n) * hl);
  ops_.linear_backward_input(s.dln2.data(), s.dgate.data(), weights<T>(gate_w_), n, c, hl, false);
  ops_.linear_backward_input(s.dln2.data(), s.dup.data(), weights<T>(up_w_), n, c, hl, true);
  tp_sum(s.dln2.data(), size_t(n) * c);
  // dx2 = dy + rmsnorm_2'(dln2): the residual joins in the norm's dgrad
  ops_.rmsnorm_backward_input(s.dx2.data(), s.dln2.data(), s.x2.data(), s.ln2_rstd.data(), weights<T>(ln2_w_), n, c,
                              dy);
  // attention half
  ops_.linear_backward_input(s.dattn.data(), s.dx2.data(), weights<T>(proj_w_), n, cl, c, false);
  attention_backward_input(s, s.dattn.data());
  ops_.rotary_backward_input(s.dqkv.data(), dims_.batch, dims_.seq_len, dims_.local_heads(), dims_.local_kv_heads(),
                             dims_.head_dim(), dims_.rope_theta);
  ops_.linear_backward_input(s.dln1.data(), s.dqkv.data(), weights<T>(qkv_w_), n, c, ql, false);
  tp_sum(s.dln1.data(), size_t(n) * c);
  // dx = dx2 + rmsnorm_1'(dln1)
  ops_.rmsnorm_backward_input(dx, s.dln1.data(), s.x, s.ln1_rstd.data(), weights<T>(ln1_w_), n, c, s.dx2.data());
}

template <typename T>
void LlamaBlock<T>::backward_weight(int mb) {
  const int n = dims_.rows(), c = dims_.d_model, cl = dims_.local_channels(), ql = dims_.local_qkv();
  const int hl = dims_.local_hidden();
  Slot& s = slots_.get(mb);
  PPTRAIN_CHECK(s.dy, "block W before I for microbatch ", mb);
  ops_.linear_backward_weight(down_w_.grad.data(), nullptr, s.dy, s.act.data(), n, hl, c);
  ops_.linear_backward_weight(gate_w_.grad.data(), nullptr, s.dgate.data(), s.ln2.data(), n, c, hl);
  ops_.linear_backward_weight(up_w_.grad.data(), nullptr, s.dup.data(), s.ln2.data(), n, c, hl);
  ops_.rmsnorm_backward_weight(ln2_w_.grad.data(), s.dln2.data(), s.x2.data(), s.ln2_rstd.data(), n, c);
  ops_.linear_backward_weight(proj_w_.grad.data(), nullptr, s.dx2.data(), s.attn.data(), n, cl, c);
  ops_.linear_backward_weight(qkv_w_.grad.data(), nullptr, s.dqkv.data(), s.ln1.data(), n, c, ql);
  ops_.rmsnorm_backward_weight(ln1_w_.grad.data(), s.dln1.data(), s.x, s.ln1_rstd.data(), n, c);
  slots_.release(mb);
}

template class LlamaBlock<float>;
template class LlamaBlock<bfloat16>;

}  // namespace pptrain
