// Text sampling at the end of a byte-level run (vocab 256): shows what the model learned.
#pragma once
#include <string>

#include "runtime/watchdog.h"
#include "train/trainer.h"

namespace pptrain {

// Generates `count` bytes after a newline with temperature 1, from the trained
// parameters. Runs where the whole model is on one rank (pp = tp = 1); returns "" elsewhere.
// Changes nothing the training uses (a batch-1 model over the same parameters, its own
// random stream), so a sample during a run leaves the run's losses as they were.
// `progress` (optional) ticks once per byte, so the watchdog sees a long sample move.
std::string generate_sample(Trainer& trainer, int count, Progress* progress = nullptr);

// Whether a run samples at all: logging.sample_tokens > 0 and a byte-level vocabulary (256),
// whose tokens print as text.
inline bool samples_text(const Config& cfg) { return cfg.logging.sample_tokens > 0 && cfg.model.vocab_size == 256; }

}  // namespace pptrain
