// run_training: the training loop of `pptrain train`, on an assembled Job. Per step:
// train (Trainer::train_step), log metrics, evaluate every training.eval_every steps,
// checkpoint (CheckpointManager); before the first step it creates the output folders and
// resumes; at the end it writes the Chrome trace (logging.trace) and, for byte-level
// models, prints a sample. Test programs run the same loop, observing it through hooks.
// Under training.post_validation a step's result (loss, norm, stop signal) is known one
// train_step later (train/trainer.h): the loop reports each result when it arrives, and
// wherever it needs the state of exactly one step — an evaluation, a checkpoint, the stop
// after a signal (which then comes one step later than synchronous), hooks.stop_after,
// parameter dumps, the last step — it settles the pending step first (Trainer::settle),
// so everything saved, evaluated or dumped is what synchronous training gives.
#pragma once
#include <functional>
#include <string>

#include "job/job.h"
#include "train/trainer.h"

namespace pptrain {

struct TrainingHooks {
  std::string dump_dir;  // parameter dumps of every rank after every step (train/param_dump.h)
  // Non-empty: each step k > 1 starts from STEP_FROM/step_<k−1>.h5 (a reference run's
  // checkpoints), not from this run's step k − 1, so that every dumped step of a layout can be
  // compared with the reference's from identical state in one run (the equivalence tests).
  std::string step_from;
  int stop_after = 0;    // > 0: leave after this step (the LR schedule still spans training.steps)
  std::function<void(Trainer&, int resumed_from)> after_resume;
  // Before the step's checkpoint. Under post-validation it may come one step late, with the
  // parameters already holding the next step's optimistic update.
  std::function<void(Trainer&, const StepResult&)> after_step;
  std::function<void(Trainer&)> at_end;
};

// Collective over the job's world. Returns the process exit code: 0, or
// kExitStoppedEarly (75, train/stop_signals.h) when SIGTERM, SIGINT or SIGUSR1 stopped the
// run after a step and it saved a checkpoint there; 1 when stopped without checkpoint.dir. Errors, a non-finite
// step under training.on_nonfinite: stop among them, throw pptrain::Error. A rank that
// makes no progress for runtime.watchdog_s seconds ends the process (runtime/watchdog.h).
int run_training(Job& job, const TrainingHooks& hooks = {});

}  // namespace pptrain
