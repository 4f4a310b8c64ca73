// The whole GPT-2 model as one Stage on one rank (the cpu backend in fp32 unless given
// another): what the model, checkpoint, import and cuda backend tests build their cases from.
#pragma once
#include <cstdint>
#include <memory>

#include "backend/ops.h"
#include "core/communicator.h"
#include "core/config.h"
#include "model/stage.h"

namespace pptrain::testing {

// 2 blocks, 2 heads, d_model 8, seq_len 5, vocab 11 (odd, so tp=2 pads it).
inline ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 8;
  m.seq_len = 5;
  m.vocab_size = 11;
  return m;
}

struct SingleRankModel {
  std::unique_ptr<Ops> ops;
  LocalComm tp;
  ModelDims dims;
  std::unique_ptr<ParamStore> params;
  std::unique_ptr<Stage> stage;

  SingleRankModel(const ModelConfig& m, int batch, uint64_t seed, std::unique_ptr<Ops> backend = make_cpu_ops(),
                  Precision precision = Precision::fp32)
      : ops(std::move(backend)) {
    dims = ModelDims::from(m, batch, 1, 0);
    params = std::make_unique<ParamStore>(*ops, 1, 0, seed);
    stage = make_stage(*params, dims, StageSpec{0, 0, m.n_layer, true, true}, tp, precision);
  }
};

}  // namespace pptrain::testing
