// ZB-H2 (Qi et al., 2024, section 2.2): more warm-up forwards fill the bubble before the
// first I, and the W passes are reordered to the tail, turning 1F1B's trapezoid into a
// parallelogram. Rank r runs 2(p-1-r) warm-up forwards, then steps of F, I, W with W
// lagging 2r steps behind I; the 2r deferred W's end the rank's program. Rank r holds up
// to 2(p-r)-1 microbatches waiting for I (2p-1 on the first rank) and 2r pending W's.
// With T_F = T_I = T_W and m >= 2p-1 no rank idles between its first and last action:
// the bubble inside each rank's span is (p-1)(T_F+T_I-2T_W) = 0; what remains is the
// start-up skew that the paper removes by not synchronizing the optimizer step.
#include <algorithm>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_zb_h2(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank != 1) fail("zb-h2 needs 1 stage per rank (got ", stages_per_rank, ")");
  Schedule s = empty_schedule("zb-h2", pp, microbatches, 1, Placement::Loop);
  for (int rank = 0; rank < pp; ++rank) {
    auto& actions = s.program[rank];
    const int warmup = std::min(2 * (pp - 1 - rank), microbatches);
    int forwards = 0, inputs = 0, weights = 0;
    for (; forwards < warmup; ++forwards) actions.push_back({Op::F, rank, forwards});
    for (int step = 0; inputs < microbatches; ++step) {
      if (forwards < microbatches) actions.push_back({Op::F, rank, forwards++});
      actions.push_back({Op::I, rank, inputs++});
      if (step >= 2 * rank) actions.push_back({Op::W, rank, weights++});
    }
    while (weights < microbatches) actions.push_back({Op::W, rank, weights++});
  }
  return s;
}

}  // namespace pptrain::pipeline
