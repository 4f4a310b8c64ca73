// IoGroup: the ranks that write or read one checkpoint file together. Built from the
// job's world Communicator: an MpiComm gives MPI-IO (parallel HDF5, collective
// transfers); anything else (a single process, tools, tests without MPI) gives one rank
// with HDF5's default POSIX driver.
//
// agree() is how the checkpoint code turns a problem found on some ranks (a missing
// dataset, a shape mismatch, a failed rename) into the same pptrain::Error on every rank
// before anyone enters a collective call that would otherwise hang.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace pptrain {

class IoGroup {
 public:
  // `world` may be null (one process). Collective over `world` only in that it is used
  // collectively afterwards; construction itself communicates nothing.
  explicit IoGroup(Communicator* world);
  static IoGroup single() { return IoGroup(nullptr); }
  IoGroup(const IoGroup&) = delete;  // comm_ may point at local_
  IoGroup& operator=(const IoGroup&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool uses_mpi_io() const { return mpi_ != MPI_COMM_NULL; }
  MPI_Comm mpi() const { return mpi_; }
  Communicator& comm() const { return *comm_; }

  // Collective. Every rank passes the problem it found ("" for none). If any rank found
  // one, every rank throws pptrain::Error with the message of the lowest such rank.
  void agree(const std::string& local_error) const;
  // Collective: every rank's `bytes`, indexed by rank.
  std::vector<std::string> allgather(const std::string& bytes) const;
  // Collective: the element-wise sum over ranks, modulo 2^64 (checksums).
  void sum(std::vector<uint64_t>& values) const;
  void barrier() const { comm_->barrier(); }

 private:
  LocalComm local_;
  Communicator* comm_;
  MPI_Comm mpi_ = MPI_COMM_NULL;
};

}  // namespace pptrain
