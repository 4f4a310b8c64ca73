// Token + position embedding (the first stage's first layer). Llama has no learned
// positions (its rotary embedding acts inside attention): wte only, no wpe.
// F:  y[N,C] = wte[token] + wpe[t]; with tp > 1 wte is split by vocabulary rows, each
//     rank adds the rows it owns and an all-reduce sums the shards (vocab-parallel
//     embedding); only tp rank 0 adds wpe so the sum counts it once.
// I:  nothing (the inputs are token ids).
// W:  dwte[token] += dy, dwpe[t] += dy (dy is the same on every tp rank).
#pragma once
#include "core/communicator.h"
#include "model/dims.h"
#include "model/layer.h"
#include "model/param.h"

namespace pptrain {

ParamSpec token_embedding_spec(const ModelDims& d);
ParamSpec position_embedding_spec(const ModelDims& d);

template <typename T>
class Embedding final : public Layer<T> {
 public:
  Embedding(ParamStore& params, const ModelDims& dims, Communicator& tp);
  void forward(int mb, const T* x, T* y, const MicrobatchData& data) override;
  void backward_input(int mb, const T* dy, T* dx) override;
  void backward_weight(int mb) override;
  void discard(int mb) override { slots_.erase(mb); }
  size_t slot_bytes() const override { return 0; }

 private:
  struct Slot { const int32_t* tokens = nullptr; const T* dy = nullptr; };
  Ops& ops_;
  ModelDims dims_;
  Communicator& tp_;
  Param& wte_;
  Param* wpe_;  // null for llama
  std::map<int, Slot> slots_;
};

}  // namespace pptrain
