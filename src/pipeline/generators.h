// One generator per schedule (one .cpp each). A generator returns the compute actions
// (F, B, I, W) of every rank and the stage placement; lowering adds the communication.
// Each checks the (pp, microbatches, stages_per_rank) it supports and throws
// pptrain::Error naming the constraint otherwise. Callers go through generate_schedule()
// (registry.h), which checks pp, microbatches >= 1 first.
#pragma once
#include "pipeline/ir.h"

namespace pptrain::pipeline {

Schedule make_gpipe(int pp, int microbatches, int stages_per_rank);
Schedule make_1f1b(int pp, int microbatches, int stages_per_rank);
Schedule make_interleaved_1f1b(int pp, int microbatches, int stages_per_rank);
Schedule make_looped_bfs(int pp, int microbatches, int stages_per_rank);
Schedule make_zb_h1(int pp, int microbatches, int stages_per_rank);
Schedule make_zb_h2(int pp, int microbatches, int stages_per_rank);
Schedule make_zbv(int pp, int microbatches, int stages_per_rank);
Schedule make_dualpipev(int pp, int microbatches, int stages_per_rank);

// The forward-only program of a training schedule (evaluation): every rank runs its F
// actions in (microbatch, stage) order under the same placement, lowered.
Schedule make_forward_only(const Schedule& train);

// An empty program of pp ranks with the given shape.
inline Schedule empty_schedule(const char* name, int pp, int microbatches, int stages_per_rank,
                               Placement placement) {
  Schedule s;
  s.name = name;
  s.pp = pp;
  s.microbatches = microbatches;
  s.stages_per_rank = stages_per_rank;
  s.placement = placement;
  s.program.resize(pp);
  return s;
}

}  // namespace pptrain::pipeline
