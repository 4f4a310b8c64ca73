// 1F1B (PipeDream-Flush, Narayanan et al., 2021). Rank r runs p-1-r warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards. Same bubble
// as GPipe, (p-1)(T_F+T_B), but rank r holds at most p-r microbatches (p on the first rank).
// Works for any m, including m < p (the warm-up is then capped at m).
#include <algorithm>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_1f1b(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank != 1)
    fail("1f1b needs 1 stage per rank (got ", stages_per_rank,
         "; interleaved-1f1b runs several)");
  Schedule s = empty_schedule("1f1b", pp, microbatches, 1, Placement::Loop);
  for (int rank = 0; rank < pp; ++rank) {
    auto& actions = s.program[rank];
    int warmup = std::min(pp - 1 - rank, microbatches);
    for (int mb = 0; mb < warmup; ++mb) actions.push_back({Op::F, rank, mb});
    for (int k = 0; k < microbatches - warmup; ++k) {
      actions.push_back({Op::F, rank, warmup + k});
      actions.push_back({Op::B, rank, k});
    }
    for (int mb = microbatches - warmup; mb < microbatches; ++mb)
      actions.push_back({Op::B, rank, mb});
  }
  return s;
}

}  // namespace pptrain::pipeline
