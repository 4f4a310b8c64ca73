// NCCL communicators for `device: cuda`, behind a header free of CUDA, so the job can ask
// for them in every build. The definition lives with NcclComm (parallel/nccl_comm.cpp),
// which is compiled only with the cuda backend (real, or emulated for the tests); a build
// without it links parallel/no_nccl.cpp instead, which says so.
#pragma once
#include <memory>

#include "backend/ops.h"
#include "core/communicator.h"
#include "parallel/mpi_comm.h"

namespace pptrain {

// An NcclComm over the ranks of `group` (which must outlive it), ordered against the
// compute stream of `ops`, which must be the cuda backend. Collective over `group`.
std::unique_ptr<Communicator> make_nccl_comm(MpiComm& group, Ops& ops);

// A StagedMpiComm (parallel/staged_comm.h) over `group`: the cuda backend's tensors of
// `ops` moved by MPI through pinned host buffers. Collective over `group`.
std::unique_ptr<Communicator> make_staged_mpi_comm(MpiComm& group, Ops& ops);

}  // namespace pptrain
