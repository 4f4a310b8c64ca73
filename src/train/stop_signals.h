// StopSignals: SIGTERM, SIGINT and SIGUSR1 ask a training run to stop early and cleanly.
// Slurm sends SIGTERM at the time limit and on preemption (and --signal=USR1@N a warning
// before it); mpirun and srun forward signals to every rank. The handler only records the
// signal; the training loop reads it once per step, the ranks agree on it inside the step's
// existing reductions (Trainer::train_step), and every rank stops after the same step,
// saves a checkpoint and exits with kExitStoppedEarly (1 when checkpoint.dir is unset:
// nothing to resume from). A second signal of the three while
// the first is pending ends the process at once (default action, re-raised).
//
// RAII: the constructor installs the handlers, the destructor restores the previous ones.
// Instances nest: `pptrain train` makes one in main before MPI starts (a signal in the
// first second of start-up counts, instead of killing the process with no line), and
// run_training makes its own for library callers; only the outermost installs.
#pragma once
#include <csignal>

namespace pptrain {

// "Stopped early, resumable": sysexits.h's EX_TEMPFAIL (a temporary failure, try again).
// The sbatch scripts requeue the job on this code; `resume: auto` then continues it.
inline constexpr int kExitStoppedEarly = 75;

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received by this process (SIGTERM, SIGINT or SIGUSR1), 0 if none.
  static int received();
  // "SIGTERM", "SIGINT", "SIGUSR1"
  static const char* name(int signal);
  // The signals handled, in the order their stop requests are counted (Trainer).
  static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};

 private:
  struct sigaction previous_[3];
};

}  // namespace pptrain
