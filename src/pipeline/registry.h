// The schedule registry: generator names, and the one call the runtime uses to get the
// program it executes.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "pipeline/ir.h"
#include "pipeline/transform.h"

namespace pptrain::pipeline {

// gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zbv, dualpipev.
const std::vector<std::string>& schedule_names();
// Stages per rank a schedule runs when none is asked for: 2 for interleaved-1f1b, zbv and
// dualpipev, else 1. Throws Error for an unknown name.
int default_stages_per_rank(const std::string& name);

// The compute program (F, B, I, W per rank) of a named schedule; stages_per_rank = 0 takes
// the default. Not validated. Throws Error for an unknown name, pp or microbatches < 1, or
// a shape the schedule does not support (naming the constraint).
Schedule generate_schedule(const std::string& name, int pp, int microbatches,
                           int stages_per_rank);

struct PrepareOptions {
  BackwardForm backward = BackwardForm::AsGenerated;
  double max_in_flight = 0;  // ValidateOptions::max_in_flight
};

// What the runtime executes: `spec` is a schedule name or "file:PATH.csv" (placement taken
// from the file's stages; stages_per_rank = 0 infers it too). The compute program is
// rewritten to the asked backward form, validated, lowered unless the file already has
// communication, and validated again (a program lowered here also with blocking sends).
Schedule prepare_schedule(const std::string& spec, int pp, int microbatches, int stages_per_rank,
                          const PrepareOptions& opts = {});

// The schedule a training config asks for: prepare_schedule of parallel.schedule for its
// (pp, microbatches, stages_per_rank). An error names the config file and key.
Schedule prepare_schedule(const Config& cfg);

// The placement under which every action of `program` sits on its rank: Loop if it fits,
// else V (when stages_per_rank is 2), else Loop (validate() then names the misplaced action).
Placement infer_placement(const Program& program, int pp, int stages_per_rank);

}  // namespace pptrain::pipeline
