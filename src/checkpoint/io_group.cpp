#include "checkpoint/io_group.h"

#include <cstdint>

#include "core/error.h"
#include "parallel/mpi_comm.h"

namespace pptrain {

IoGroup::IoGroup(Communicator* world) : comm_(&local_) {
  if (auto* mpi = dynamic_cast<MpiComm*>(world)) {
    comm_ = mpi;
    mpi_ = mpi->handle();
  } else if (world) {
    PPTRAIN_CHECK(world->size() == 1, "checkpoint I/O over several ranks needs an MPI communicator");
  }
}

void IoGroup::agree(const std::string& local_error) const {
  // Max over ranks of (size - rank) for ranks with an error: the lowest failing rank.
  double flag = local_error.empty() ? 0.0 : double(size() - rank());
  comm_->allreduce(&flag, 1, ReduceOp::Max);
  if (flag == 0.0) return;
  const int root = size() - int(flag);
  uint64_t length = local_error.size();
  comm_->broadcast(&length, sizeof length, root);
  std::string message = local_error;
  message.resize(length);
  comm_->broadcast(message.data(), length, root);
  throw Error(message);
}

void IoGroup::sum(std::vector<uint64_t>& values) const {
  if (!uses_mpi_io() || values.empty()) return;  // one rank: its values are the sum
  // MPI_SUM on MPI_UINT64_T is C's unsigned addition: exact modulo 2^64 in any order.
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_UINT64_T, MPI_SUM, mpi_),
            "MPI_Allreduce", cat("checkpoint checksum sum (rank ", rank(), " of ", size(), ")"));
}

std::vector<std::string> IoGroup::allgather(const std::string& bytes) const {
  if (!uses_mpi_io()) return {bytes};
  const std::string where = cat("checkpoint metadata exchange (rank ", rank(), " of ", size(), ")");
  int mine = int(bytes.size());
  std::vector<int> sizes(size()), offsets(size());
  check_mpi(MPI_Allgather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, mpi_), "MPI_Allgather", where);
  int64_t total = 0;
  for (int r = 0; r < size(); ++r) {
    offsets[r] = int(total);
    total += sizes[r];
  }
  PPTRAIN_CHECK(total < INT32_MAX, "checkpoint metadata larger than 2 GB");
  std::string all(size_t(total), '\0');
  check_mpi(MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, mpi_),
            "MPI_Allgatherv", where);
  std::vector<std::string> out(size());
  for (int r = 0; r < size(); ++r) out[r] = all.substr(offsets[r], sizes[r]);
  return out;
}

}  // namespace pptrain
