// A training run with checkpoints, as `pptrain train` runs it (Trainer + CheckpointManager),
// with what the checkpoint tests need to observe it:
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
//   --dump-final DIR   the same after the last step (DIR/final.rankR.bin)
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend/ops.h"
#include "checkpoint/checkpoint_manager.h"
#include "core/config.h"
#include "core/faults.h"
#include "support/mpi_program.h"
#include "runtime/job_layout.h"
#include "pipeline/ir.h"
#include "train/param_dump.h"
#include "train/trainer.h"

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
  JobLayout layout(cfg);
  ParallelContext& par = layout.parallel();
  auto ops = make_cpu_ops();
  all_faults.announce(mpi.rank());
  const Faults faults = all_faults.on_rank(mpi.rank());
  Trainer trainer(cfg, par, *ops, faults);
  CheckpointManager checkpoints(cfg, par, faults);

  const int resumed = checkpoints.resume(trainer);
  if (mpi.rank() == 0) mpi_test::say("resumed_from ", resumed);
  auto dump = [&](const std::string& dir, const char* what) {
    if (dir.empty()) return;
    std::filesystem::create_directories(dir);
    write_param_dump(cat(dir, "/", what, ".rank", mpi.rank(), ".bin"), 0.0, trainer.params());
  };
  dump(dump_loaded, "loaded");
  while (trainer.step() < cfg.training.steps) {
    StepResult r = trainer.train_step();
    if (mpi.rank() == 0) {
      char line[96];
      std::snprintf(line, sizeof line, "step %d loss %.17g", r.step, r.loss);
      mpi_test::say(line);
    }
    const bool last = r.step == cfg.training.steps;
    checkpoints.after_step(trainer, last);
    if (r.step == stop_after) break;
  }
  dump(dump_final, "final");
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
