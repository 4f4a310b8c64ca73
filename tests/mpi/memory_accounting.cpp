// memory_accounting CONFIG [section.key=value ...]: builds the Job of CONFIG on the cpu
// backend (with this rank's planted faults of PPTRAIN_FAULTS) wrapped in CountingOps
// (tests/support/counting_ops.h), and prints per rank, after one training step and again
// after reset_peak_memory and a second step,
//   rank R step S counted_peak P backend_peak B counted_live L backend_in_use U reserved V
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

void report(int rank, int step, const testing::CountingOps& counter) {
  const MemoryStats backend = counter.memory_stats();
  mpi_test::say("rank ", rank, " step ", step, " counted_peak ", counter.peak_bytes(), " backend_peak ", backend.peak,
                " counted_live ", counter.live_bytes(), " backend_in_use ", backend.in_use, " reserved ",
                backend.reserved);
}

void measure(MpiSession& mpi, const std::vector<std::string>& args) {
  MPI_EXPECT(!args.empty(), "usage: memory_accounting CONFIG [section.key=value ...]");
  const Config cfg = load_config(args[0], {args.begin() + 1, args.end()});
  const Faults faults = Faults::from_env().on_rank(mpi.rank());
  auto counting = std::make_unique<testing::CountingOps>(make_cpu_ops(faults));
  testing::CountingOps& counter = *counting;
  Job job(cfg, faults, std::move(counting));
  Trainer trainer(job);
  trainer.train_step();
  report(mpi.rank(), 1, counter);
  counter.reset_peak_memory();  // both: the backend's and the counter's own
  trainer.train_step();
  report(mpi.rank(), 2, counter);
}

}  // namespace

int main(int argc, char** argv) { return mpi_test::run_mpi_program(argc, argv, measure); }
