#include "model/embedding.h"

namespace pptrain {

ParamSpec token_embedding_spec(const ModelDims& d) {
  ParamSpec s{"wte.weight", {d.vocab_size, d.d_model}, Shard::Rows, Init::Normal, 0.02f, true};
  s.padded_rows = d.padded_vocab();
  return s;
}

ParamSpec position_embedding_spec(const ModelDims& d) {
  return {"wpe.weight", {d.seq_len, d.d_model}, Shard::Replicated, Init::Normal, 0.01f, true};
}

template <typename T>
Embedding<T>::Embedding(ParamStore& params, const ModelDims& dims, Communicator& tp)
    : ops_(params.ops()), dims_(dims), tp_(tp),
      wte_(params.get_or_create(token_embedding_spec(dims))),
      wpe_(dims.llama ? nullptr : &params.get_or_create(position_embedding_spec(dims))) {}

template <typename T>
void Embedding<T>::forward(int mb, const T* /*x*/, T* y, const MicrobatchData& data) {
  const int n = dims_.rows(), c = dims_.d_model;
  const T* wpe = wpe_ && dims_.tp_rank == 0 ? weights<T>(*wpe_) : nullptr;
  ops_.embedding_forward(y, data.tokens, weights<T>(wte_), wpe, n, dims_.seq_len, c,
                         dims_.vocab_offset(), dims_.local_vocab());
  if (dims_.tp > 1) tp_.allreduce(y, size_t(n) * c, ReduceOp::Sum);
  slots_[mb] = {data.tokens, nullptr};
}

template <typename T>
void Embedding<T>::backward_input(int mb, const T* dy, T* /*dx*/) {
  auto it = slots_.find(mb);
  PPTRAIN_CHECK(it != slots_.end(), "embedding I before F for microbatch ", mb);
  it->second.dy = dy;
}

template <typename T>
void Embedding<T>::backward_weight(int mb) {
  auto it = slots_.find(mb);
  PPTRAIN_CHECK(it != slots_.end() && it->second.dy, "embedding W before I for microbatch ", mb);
  ops_.embedding_backward_weight(wte_.grad.data(), wpe_ ? wpe_->grad.data() : nullptr, it->second.dy,
                                 it->second.tokens, dims_.rows(), dims_.seq_len, dims_.d_model,
                                 dims_.vocab_offset(), dims_.local_vocab());
  slots_.erase(it);
}

template class Embedding<float>;
template class Embedding<bfloat16>;

}  // namespace pptrain
