#include "train/stop_signals.h"

#include "core/error.h"

namespace pptrain {
namespace {

// The one global outside logging, and it has to be: a signal handler can reach nothing
// else, and may only write a lock-free object (a volatile sig_atomic_t) to stay
// async-signal-safe. Written by the handler, read by the training loop.
volatile std::sig_atomic_t g_received_signal = 0;
// Instances alive: main's (installed before MPI starts, so a signal during start-up counts)
// and run_training's inside it; only the outermost installs and restores.
int g_depth = 0;

void on_stop_signal(int signal) {
  if (g_received_signal != 0) {
    // Second signal: the user (or the scheduler) insists. Default action now: sigaction
    // and raise are async-signal-safe.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signal, &dfl, nullptr);
    raise(signal);
    return;
  }
  g_received_signal = signal;
}

}  // namespace

StopSignals::StopSignals() {
  if (g_depth++ > 0) return;  // an outer instance already records the signals
  g_received_signal = 0;
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write that the signal interrupts goes on (the loop polls the
  // flag between steps; nothing waits for the signal itself).
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i)
    if (sigaction(kSignals[i], &action, &previous_[i]) != 0) fail("cannot install the handler of ", name(kSignals[i]));
}

StopSignals::~StopSignals() {
  if (--g_depth > 0) return;
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

int StopSignals::received() { return g_received_signal; }

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace pptrain
