// The communicator of one group of a cuda job: NCCL, or MPI through pinned host buffers
// (StagedMpiComm) where parallel.comm says so or NCCL cannot serve the group, because two
// of its ranks run on one GPU (NCCL refuses that). The job's groups and the profiler's
// (partition/profile.cpp) are made here, so both move tensors the same way.
#pragma once
#include <memory>
#include <string>

#include "backend/ops.h"
#include "core/communicator.h"
#include "parallel/mpi_comm.h"

namespace pptrain {

// How one group moves tensors, and why (for the start-up line).
struct GroupTransport {
  bool nccl = true;  // else MPI through pinned host buffers (parallel/staged_comm.h)
  std::string why;
};

// parallel.comm (auto | nccl | mpi) for `group`, whose ranks run the cuda backend `ops`.
// auto: NCCL unless two ranks of the group run on one GPU (the same host and device
// index); every rank learns every rank's (host, device), so all decide alike. Collective
// over `group` for auto.
GroupTransport choose_transport(const std::string& comm, MpiComm& group, Ops& ops);

// That transport's communicator over `group`; `chosen` (optional) receives the choice.
// Collective over `group`.
std::unique_ptr<Communicator> make_device_comm(const std::string& comm, MpiComm& group, Ops& ops,
                                               GroupTransport* chosen = nullptr);

}  // namespace pptrain
