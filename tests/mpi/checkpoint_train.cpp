// A training run with checkpoints: the loop of `pptrain train` itself (run_training on a
// Job), observed through its hooks as the checkpoint tests need:
//   checkpoint_train CONFIG [section.key=value ...] [--stop-after K] [--dump-loaded DIR]
//                    [--dump-final DIR]
// Prints "resumed_from S" and one "step N loss L" line per step (world rank 0, %.17g).
// A pptrain::Error is printed on the rank that raised it, which then waits a moment
// before aborting the job, so that ranks failing together all get their line out
// before MPI_Abort ends them (the tests check the message of every rank). Planted faults
// (PPTRAIN_FAULTS, core/faults.h) act as in `pptrain train`.
//   --stop-after K     exits cleanly after step K (the LR schedule still spans
//                      training.steps), i.e. "train K steps, save, exit"
//   --dump-loaded DIR  right after resume, parameter dumps of every rank
//                      (DIR/loaded.rankR.bin, train/param_dump.h)
//   --dump-final DIR   the same after the last step (DIR/final.rankR.bin), ZeRO-1 gradients
//                      all-gathered first
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/config.h"
#include "core/faults.h"
#include "job/job.h"
#include "support/mpi_program.h"
#include "train/param_dump.h"
#include "train/run_training.h"

using namespace pptrain;

namespace {

void train_with_checkpoints(MpiSession& mpi, const std::vector<std::string>& args) {
  std::string config, dump_loaded, dump_final;
  std::vector<std::string> overrides;
  int stop_after = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--stop-after" && i + 1 < args.size()) stop_after = std::stoi(args[++i]);
    else if (args[i] == "--dump-loaded" && i + 1 < args.size()) dump_loaded = args[++i];
    else if (args[i] == "--dump-final" && i + 1 < args.size()) dump_final = args[++i];
    else if (config.empty()) config = args[i];
    else overrides.push_back(args[i]);
  }
  const Faults all_faults = Faults::from_env();
  const Config cfg = load_config(config, overrides);
  all_faults.announce(mpi.rank());
  MpiComm world = checked_world(cfg);
  JobPlan plan = plan_job(cfg, world);
  Job job(std::move(plan), std::move(world), all_faults.on_rank(mpi.rank()));

  auto dump = [&](Trainer& trainer, const std::string& dir, const char* what) {
    if (dir.empty()) return;
    std::filesystem::create_directories(dir);
    write_param_dump(cat(dir, "/", what, ".rank", mpi.rank(), ".bin"), 0.0, trainer.params());
  };
  TrainingHooks hooks;
  hooks.stop_after = stop_after;
  hooks.after_resume = [&](Trainer& trainer, int resumed) {
    if (mpi.rank() == 0) mpi_test::say("resumed_from ", resumed);
    dump(trainer, dump_loaded, "loaded");
  };
  hooks.after_step = [&](Trainer&, const StepResult& r) {
    if (mpi.rank() != 0) return;
    char line[96];
    std::snprintf(line, sizeof line, "step %d loss %.17g", r.step, r.loss);
    mpi_test::say(line);
  };
  hooks.at_end = [&](Trainer& trainer) {
    // ZeRO-1 leaves each dp rank the sums of its range only: the dump shows every sum.
    if (!dump_final.empty()) trainer.gather_gradients();
    dump(trainer, dump_final, "final");
  };
  run_training(job, hooks);
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession& mpi, const std::vector<std::string>& args) {
    try {
      train_with_checkpoints(mpi, args);
    } catch (const Error& e) {
      log::error(e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      mpi.abort_job(1);
    }
  });
}
