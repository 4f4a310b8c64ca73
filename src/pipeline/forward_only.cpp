#include "pipeline/generators.h"
#include "pipeline/lower.h"

namespace pptrain::pipeline {

// (microbatch, stage) order is a topological order of the forward graph, so every rank
// meets its receives in the order their sends happen and the program cannot deadlock.
Schedule make_forward_only(const Schedule& train) {
  Schedule s = empty_schedule("", train.pp, train.microbatches, train.stages_per_rank, train.placement);
  s.name = train.name + "/forward";
  const int stages = train.pp * train.stages_per_rank;
  for (int mb = 0; mb < train.microbatches; ++mb)
    for (int st = 0; st < stages; ++st)
      s.program[rank_of_stage(train.placement, st, train.pp)].push_back({Op::F, st, mb});
  return lower(s);
}

}  // namespace pptrain::pipeline
