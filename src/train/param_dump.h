// Parameter dumps: every rank writes the values and gradients of the parameter shards it
// holds, tagged with where they sit in the global tensors; reading all ranks' files
// reassembles the global model. Used to check that every parallel layout computes the
// same loss, gradients and parameters as a single process (`pptrain train --dump DIR`).
// Gradients are dumped as reduced and unclipped: AdamW applies the clip factor as it reads
// them and leaves them as they are, so every run's dump shows the same unclipped quantity.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "model/param.h"

namespace pptrain {

// Writes `path` with the given loss and every parameter of `params` (values, gradients).
// Under sharded masters (ParamStore::masters_sharded) the values come from
// `gathered_masters`, the whole flat masters arena ([flat_layout().total()],
// Trainer::gathered_masters); otherwise it is nullptr and the values are the masters.
void write_param_dump(const std::string& path, double loss, ParamStore& params,
                      Buffer<float>* gathered_masters = nullptr);

struct GlobalTensor {
  std::vector<int64_t> shape;
  std::vector<float> value, grad;  // global, row-major
  std::vector<char> covered;       // 1 where some rank supplied the element
};

struct GlobalDump {
  double loss = 0;
  std::map<std::string, GlobalTensor> tensors;
  double max_replica_diff = 0;  // largest |difference| between copies of one element
};

// Reads and merges the dumps of all ranks of one step. Throws pptrain::Error on bad files.
GlobalDump read_param_dumps(const std::vector<std::string>& paths);

}  // namespace pptrain
