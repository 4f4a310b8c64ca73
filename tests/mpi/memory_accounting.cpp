// memory_accounting CONFIG [section.key=value ...]: builds the Job of CONFIG on the cpu
// backend (with this rank's planted faults of PPTRAIN_FAULTS) wrapped in CountingOps
// (tests/support/counting_ops.h), and prints per rank at four points,
//   rank R at A counted_peak P backend_peak B counted_live L backend_in_use U reserved V
// A = step1 (after one training step), step2 (after reset_peak_memory and a second step),
// released (after the trainer is destroyed: the optimizer moments, token buffers and
// executors are released; nothing is released during a step, the slot pools keep their
// slots), again (after reset_peak_memory, a new trainer and one more step),
// where P and L are CountingOps' own high-water mark and live bytes (the sizes asked of
// allocate) and B, U, V the backend's Ops::memory_stats.
#include "core/config.h"
#include "core/faults.h"
#include "job/job.h"
#include "support/counting_ops.h"
#include "support/mpi_program.h"
#include "train/trainer.h"

using namespace pptrain;

namespace {

void report(int rank, const char* at, const testing::CountingOps& counter) {
  const MemoryStats backend = counter.memory_stats();
  mpi_test::say("rank ", rank, " at ", at, " counted_peak ", counter.peak_bytes(), " backend_peak ", backend.peak,
                " counted_live ", counter.live_bytes(), " backend_in_use ", backend.in_use, " reserved ",
                backend.reserved);
}

void measure(MpiSession& mpi, const std::vector<std::string>& args) {
  MPI_EXPECT(!args.empty(), "usage: memory_accounting CONFIG [section.key=value ...]");
  const Config cfg = load_config(args[0], {args.begin() + 1, args.end()});
  const Faults faults = Faults::from_env().on_rank(mpi.rank());
  auto counting = std::make_unique<testing::CountingOps>(make_cpu_ops(faults));
  testing::CountingOps& counter = *counting;
  MpiComm world = checked_world(cfg);
  JobPlan plan = plan_job(cfg, world);
  Job job(std::move(plan), std::move(world), faults, std::move(counting));
  auto trainer = std::make_unique<Trainer>(job);
  trainer->train_step();
  report(mpi.rank(), "step1", counter);
  counter.reset_peak_memory();  // both: the backend's and the counter's own
  trainer->train_step();
  report(mpi.rank(), "step2", counter);
  trainer.reset();
  report(mpi.rank(), "released", counter);
  counter.reset_peak_memory();
  trainer = std::make_unique<Trainer>(job);
  trainer->train_step();
  report(mpi.rank(), "again", counter);
}

}  // namespace

int main(int argc, char** argv) { return mpi_test::run_mpi_program(argc, argv, measure); }
