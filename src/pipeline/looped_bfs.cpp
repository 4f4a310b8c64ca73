// Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2022): loop placement
// with v stages per rank, run breadth first. Each rank runs the forward of its first
// stage on all microbatches, then of its next stage, ..., then the backwards of its
// stages in reverse order, each on all microbatches. With m >= p the pipeline stays full
// between stages, so the bubble is (p-1)(T_F+T_B)/v like interleaved 1F1B, but every rank
// holds all m microbatches (as GPipe). v = 1 is GPipe.
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_looped_bfs(int pp, int microbatches, int stages_per_rank) {
  Schedule s = empty_schedule("looped-bfs", pp, microbatches, stages_per_rank, Placement::Loop);
  for (int rank = 0; rank < pp; ++rank) {
    auto& actions = s.program[rank];
    std::vector<int> stages = stages_of_rank(Placement::Loop, rank, pp, stages_per_rank);
    for (int stage : stages)
      for (int mb = 0; mb < microbatches; ++mb) actions.push_back({Op::F, stage, mb});
    for (auto it = stages.rbegin(); it != stages.rend(); ++it)
      for (int mb = 0; mb < microbatches; ++mb) actions.push_back({Op::B, *it, mb});
  }
  return s;
}

}  // namespace pptrain::pipeline
