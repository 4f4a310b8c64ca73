// ParallelContext: where this rank sits in the dp x pp x tp grid and the groups it talks
// to, as the model, the trainer and the checkpoints see it: coordinates and Communicator
// interfaces, whatever carries them (MPI, NCCL, or groups of one for a single process).
// A Grid makes one (Grid::context()); the job swaps in NCCL groups on GPUs. Passed
// explicitly: pptrain has no global process-group state.
#pragma once
#include "core/communicator.h"

namespace pptrain {

struct ParallelContext {
  int dp = 1, pp = 1, tp = 1;
  int dp_rank = 0, pp_rank = 0, tp_rank = 0;
  Communicator* pp_comm = nullptr;         // group rank = pp_rank
  Communicator* tp_comm = nullptr;
  Communicator* dp_comm = nullptr;
  Communicator* embedding_comm = nullptr;  // ranks holding the tied embedding (size 1 if alone)
  Communicator* world = nullptr;
};

}  // namespace pptrain
