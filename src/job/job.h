// Job: one rank's part of a training job, assembled once from its plan (job/job_plan.h:
// the resolved config and the prepared schedule, which Job takes as they are), in this
// order:
//   grid      the dp x pp x tp ranks and their MPI groups; the embedding group from the
//             placement of the first and last stage
//   ops       the backend: cpu, or cuda on this rank's GPU
//   parallel  the groups as the model and trainer see them (ParallelContext): NCCL
//             communicators over the grid's groups on `device: cuda`, the MPI groups
//             otherwise; the world stays MPI (bootstrap, checkpoints)
//   stages    the parameters this rank holds and the stages the placement gives it
// Nothing else is touched: no files, no global state. The trainer, the checkpoints and the
// evaluation take what they need from here. Collective over MPI_COMM_WORLD (every rank
// builds its Job at the same point); a config that does not fit the job throws
// pptrain::Error on every rank before any group is created.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "backend/profiled_ops.h"
#include "core/config.h"
#include "core/faults.h"
#include "model/param.h"
#include "model/stage.h"
#include "job/job_plan.h"
#include "parallel/device_comm.h"
#include "parallel/grid.h"
#include "parallel/mpi_comm.h"
#include "parallel/parallel_context.h"
#include "pipeline/ir.h"

namespace pptrain {

// MPI_COMM_WORLD, which must hold exactly the config's dp x pp x tp ranks: checked first,
// before the plan (which may time layers on every rank), the preflight and the groups, so a
// wrong -np ends every rank with the config's name in the message.
MpiComm checked_world(const Config& cfg);

class Job {
 public:
  // `plan`: plan_job's result for this job; `world`: checked_world(plan.config).
  // `faults`: the planted faults acting on this rank (core/faults.h; tests only).
  // `ops`: the backend to use instead of the one the config's device names (tests: a
  // backend that counts its allocations); null builds the config's.
  Job(JobPlan plan, MpiComm world, const Faults& faults = {}, std::unique_ptr<Ops> ops = nullptr);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const Config& config() const { return cfg_; }
  const Faults& faults() const { return faults_; }
  const pipeline::Schedule& schedule() const { return schedule_; }
  double predicted_step_ms() const { return predicted_step_ms_; }
  MpiComm& world() { return world_; }
  const ParallelContext& parallel() const { return par_; }
  Ops& ops() { return *ops_; }
  // The backend's op profiler when logging.op_profile > 0 (ops() is then the profiler,
  // forwarding to the backend), else null.
  ProfiledOps* op_profiler() { return op_profiler_; }
  // How the groups move tensors, for the start-up line: "mpi" (cpu), "nccl" (every group of
  // a cuda job), else which group uses which and why (parallel.comm).
  std::string transport() const;
  ParamStore& params() { return *params_; }
  // This rank's stages, in increasing stage index.
  const std::vector<std::unique_ptr<Stage>>& stages() const { return stages_; }
  bool holds_stage(int stage) const;

 private:
  Config cfg_;
  Faults faults_;
  MpiComm world_;
  pipeline::Schedule schedule_;
  double predicted_step_ms_ = 0;
  Grid grid_;
  std::unique_ptr<Ops> ops_;
  ProfiledOps* op_profiler_ = nullptr;  // ops_ itself, when profiling
  std::vector<std::unique_ptr<Communicator>> comms_;  // NCCL or staged MPI; after ops_: destroyed first
  std::vector<std::pair<std::string, GroupTransport>> transports_;  // group name -> its transport
  ParallelContext par_;
  std::unique_ptr<ParamStore> params_;
  std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace pptrain
