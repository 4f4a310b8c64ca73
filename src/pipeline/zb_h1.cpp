// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024, section 2.1): 1F1B with the
// backward split into I and W, and the W passes deferred to fill the cool-down bubble.
// Rank r runs the 1F1B warm-up (p-1-r forwards), then steps of F, I, W, where the W of
// each step lags r steps behind its I; the r deferred W's run at the end, where 1F1B idles.
// The number of microbatches waiting for I stays as in 1F1B (p-r on rank r) and rank r
// holds r pending W's, so peak memory is 1F1B's (W keeps less than I). With
// T_F = T_I = T_W the bubble is (p-1)(T_F+T_I-T_W) per rank for m >= p, a third of 1F1B's.
#include <algorithm>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_zb_h1(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank != 1) fail("zb-h1 needs 1 stage per rank (got ", stages_per_rank, ")");
  Schedule s = empty_schedule("zb-h1", pp, microbatches, 1, Placement::Loop);
  for (int rank = 0; rank < pp; ++rank) {
    auto& actions = s.program[rank];
    const int warmup = std::min(pp - 1 - rank, microbatches);
    int forwards = 0, inputs = 0, weights = 0;
    for (; forwards < warmup; ++forwards) actions.push_back({Op::F, rank, forwards});
    for (int step = 0; inputs < microbatches; ++step) {
      if (forwards < microbatches) actions.push_back({Op::F, rank, forwards++});
      actions.push_back({Op::I, rank, inputs++});
      if (step >= rank) actions.push_back({Op::W, rank, weights++});
    }
    while (weights < microbatches) actions.push_back({Op::W, rank, weights++});
  }
  return s;
}

}  // namespace pptrain::pipeline
