// The schedule registry: generator names, and the one call the runtime uses to get the
// program it executes.
#pragma once
#include <optional>
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

// The largest pp * stages_per_rank * microbatches a schedule may have, generated or loaded:
// it bounds what a typo allocates, and keeps `pptrain schedule` (validate twice, lower,
// simulate, render) to seconds: pp = m = 1000 takes about 3 s, and a text time line of a
// thousand ranks is already past reading. (At pp = m = 2000 it took 20 s and 2 GB.)
inline constexpr long long kMaxStageMicrobatches = 1'000'000;
// Throws Error "NAME: pp*stages_per_rank*microbatches = N is more than this tool builds".
void check_size(const std::string& name, int pp, int stages_per_rank, int microbatches);

// The compute program (F, B, I, W per rank) of a named schedule; stages_per_rank = 0 takes
// the default. Not validated. Throws Error for an unknown name, pp or microbatches < 1, or
// a shape the schedule does not support (naming the constraint).
Schedule generate_schedule(const std::string& name, int pp, int microbatches,
                           int stages_per_rank);

struct PrepareOptions {
  BackwardForm backward = BackwardForm::AsGenerated;
  double max_in_flight = 0;            // ValidateOptions::max_in_flight
  bool blocking_sends = false;         // a given program must also finish if every send blocks
  std::optional<Placement> placement;  // for "file:" programs; default: inferred from the program
};

// A named schedule's compute program, or the program of "file:PATH.csv" (stages_per_rank
// = 0 infers it from the highest stage, the placement as PrepareOptions says). Not
// validated. Throws Error for an unknown name, a bad file or an unsupported shape.
Schedule load_or_generate(const std::string& spec, int pp, int microbatches, int stages_per_rank,
                          const PrepareOptions& opts = {});

// What the runtime executes, from a generated or loaded program: rewritten to the asked
// backward form, validated, lowered unless it already has communication, and validated
// again (a program lowered here always also with blocking sends). Throws Error naming the
// rank, position and action of the first problem.
Schedule prepare_schedule(Schedule program, const PrepareOptions& opts = {});

// The two above in one: the one path from a name or "file:PATH.csv" to a lowered,
// validated program, used by `pptrain train` and `pptrain schedule` alike.
Schedule prepare_schedule(const std::string& spec, int pp, int microbatches, int stages_per_rank,
                          const PrepareOptions& opts = {});

// The schedule a training config asks for: prepare_schedule of parallel.schedule for its
// (pp, microbatches, stages_per_rank), in runtime_form (transform.h). An error names the
// config file and key.
Schedule prepare_schedule(const Config& cfg);

// The placement under which every action of `program` sits on its rank: Loop if it fits,
// else V (when stages_per_rank is 2), else Loop (validate() then names the misplaced action).
Placement infer_placement(const Program& program, int pp, int stages_per_rank);

}  // namespace pptrain::pipeline
