// JobLayout: this rank's place in a training job, from the config: the world
// communicator, the dp x pp x tp grid with its groups (the embedding group from the
// schedule's placement of the first and last stage), and the ParallelContext the
// trainer takes. Collective over MPI_COMM_WORLD; throws pptrain::Error on every rank when
// the job's size does not match the config.
#pragma once
#include "core/config.h"
#include "parallel/grid.h"
#include "parallel/mpi_comm.h"
#include "runtime/parallel_context.h"

namespace pptrain {

class JobLayout {
 public:
  explicit JobLayout(const Config& cfg);
  JobLayout(const JobLayout&) = delete;
  JobLayout& operator=(const JobLayout&) = delete;

  MpiComm& world() { return world_; }
  Grid& grid() { return grid_; }
  ParallelContext& parallel() { return par_; }

 private:
  MpiComm world_;
  Grid grid_;
  ParallelContext par_;
};

}  // namespace pptrain
