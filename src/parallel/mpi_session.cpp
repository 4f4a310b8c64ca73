#include "parallel/mpi_session.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/log.h"

namespace pptrain {

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  // Errors on any communicator return codes instead of aborting silently, so the
  // Communicator can name the failed call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  log::set_rank(rank_, world_);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort_job(int code) const {
  // A short grace period lets the other ranks, which usually hit the same error, print
  // their own line before MPI_Abort kills them.
  if (world_ > 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  MPI_Finalize();
  std::exit(code);
}

}  // namespace pptrain
