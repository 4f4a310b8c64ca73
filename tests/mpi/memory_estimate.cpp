// memory_estimate CONFIG [section.key=value ...]: builds the Job of CONFIG on a backend
// (cpu; cuda in memory_estimate_emu, built with the emulated cuda backend) that counts its
// allocations (tests/support/counting_ops.h), takes two training steps and
// an evaluation (when the config evaluates), and prints per rank
//   rank R peak P predicted E slack S
// where P is the most bytes the backend ever held, E the prediction of
// job/memory_estimate.h for this rank less its workspace (the cpu backend's attention
// scratch and cuBLASLt's workspace are not allocated through the op interface), and S the
// part of E that is an upper bound rather than a count (io buffers of pending sends).
#include "backend/cuda/cuda_backend.h"
#include "core/config.h"
#include "job/job.h"
#include "job/memory_estimate.h"
#include "support/counting_ops.h"
#include "support/mpi_program.h"
#include "train/trainer.h"

using namespace pptrain;

namespace {

void measure(MpiSession& mpi, const std::vector<std::string>& args) {
  MPI_EXPECT(!args.empty(), "usage: memory_estimate CONFIG [section.key=value ...]");
  const Config cfg = load_config(args[0], {args.begin() + 1, args.end()});
  const int tp = cfg.parallel.tp, pp = cfg.parallel.pp;
  const int pp_rank = mpi.rank() / tp % pp, tp_rank = mpi.rank() % tp;
  MpiComm world = checked_world(cfg);
  JobPlan plan = plan_job(cfg, world);
  const MemoryEstimate predicted = estimate_rank_memory(plan.config, plan.schedule, pp_rank, tp_rank);

  auto counting = std::make_unique<testing::CountingOps>(cfg.device == "cuda" ? make_cuda_ops(cfg) : make_cpu_ops());
  const testing::CountingOps& counter = *counting;
  Job job(std::move(plan), std::move(world), {}, std::move(counting));
  Trainer trainer(job);
  trainer.train_step();
  trainer.train_step();
  if (cfg.training.eval_every > 0 && !cfg.data.val.empty()) trainer.evaluate();
  mpi_test::say("rank ", mpi.rank(), " peak ", counter.peak_bytes(), " predicted ",
                uint64_t(predicted.total() - predicted.bytes_of("workspace")), " slack ",
                uint64_t(predicted.bytes_of("io buffers")));
}

}  // namespace

int main(int argc, char** argv) { return mpi_test::run_mpi_program(argc, argv, measure); }
