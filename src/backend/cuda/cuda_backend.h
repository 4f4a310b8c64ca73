// Entry points of the cuda backend, free of CUDA headers so the CLI can include them.
#pragma once
#include <memory>

#include "backend/ops.h"

namespace pptrain {

struct Config;
class Grid;
struct ParallelContext;

// The cuda backend for `device: cuda`: selects this rank's GPU (node-local rank, see
// backend/cuda/device.h) and builds CudaOps on it. fp32 only: throws pptrain::Error for
// `training.precision: bf16`.
std::unique_ptr<Ops> make_cuda_ops(const Config& cfg);

// The cuda backend on an explicit device (tests; the emulated build has device 0 only).
std::unique_ptr<Ops> make_cuda_ops(int device);

// NCCL in place of MPI for the pp, tp, dp and embedding groups of `par` (real CUDA build
// only; defined in nccl_comm.cpp): builds one NcclComm per group of more than one rank on
// `grid`'s MPI groups and points `par` at them; `par.world` stays MPI. `ops` must be the
// cuda backend (its compute stream orders the transfers). Collective over the world, and
// the object must outlive every use of `par`.
class NcclGroups {
 public:
  NcclGroups(Grid& grid, Ops& ops, ParallelContext& par);
  ~NcclGroups();
  NcclGroups(const NcclGroups&) = delete;
  NcclGroups& operator=(const NcclGroups&) = delete;

 private:
  struct Comms;
  std::unique_ptr<Comms> comms_;
};

}  // namespace pptrain
