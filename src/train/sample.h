// Text sampling at the end of a byte-level run (vocab 256): shows what the model learned.
#pragma once
#include <string>

#include "train/trainer.h"

namespace pptrain {

// Generates `count` bytes after a newline with temperature 1, from the trained
// parameters. Runs where the whole model is on one rank (pp = tp = 1); returns "" elsewhere.
std::string generate_sample(Trainer& trainer, int count);

}  // namespace pptrain
