// GPipe (Huang et al., 2019): every rank runs all m forwards, then all m backwards.
// Bubble (p-1)(T_F+T_B) per rank; every rank holds all m microbatches' activations.
#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_gpipe(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank != 1)
    fail("gpipe needs 1 stage per rank (got ", stages_per_rank, "; looped-bfs runs several)");
  Schedule s = empty_schedule("gpipe", pp, microbatches, 1, Placement::Loop);
  for (int rank = 0; rank < pp; ++rank) {
    auto& actions = s.program[rank];
    for (int mb = 0; mb < microbatches; ++mb) actions.push_back({Op::F, rank, mb});
    for (int mb = 0; mb < microbatches; ++mb) actions.push_back({Op::B, rank, mb});
  }
  return s;
}

}  // namespace pptrain::pipeline
