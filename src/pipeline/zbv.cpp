// ZB-V (Qi et al., 2024, section 6). V placement, 2 stages per rank: rank r holds stage r
// ("chunk 0", on the way down) and stage 2p-1-r ("chunk 1", on the way back up), so the
// first and last stage share rank 0 and a microbatch's forward turns around on rank p-1.
// With T_F = T_I = T_W and m >= 2p-1 no rank idles between its first and last action, and
// rank r never holds more than 2p stage-microbatches waiting for I, i.e. p microbatches of
// half-size stages: 1F1B's peak.
//
// Rank r, with c0 = stage r, c1 = stage 2p-1-r:
//   warm-up   2(p-r)-1 x F(c0);  r x [F(c1) F(c0)];  p-r x [F(c1) I(c1) W(c1)]
//   steady    [F(c0) I(c0) W(c0) F(c1) I(c1) W(c1)] until both chunks ran every forward
//   cool-down r x [I(c0) I(c1)];  p-r x [I(c0) W(c0)];  the remaining W(c1), then W(c0)
// The phases assume m >= 2p-1 microbatches. For smaller m the program is built for
// 2p-1 and the actions of the microbatches that do not exist are dropped, which keeps
// the order of the rest (the same trick as PyTorch's ScheduleZBVZeroBubble).
#include <algorithm>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_zbv(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank != 2) fail("zbv needs exactly 2 stages per rank (got ", stages_per_rank, ")");
  const int built = std::max(2 * pp - 1, microbatches);
  Schedule s = empty_schedule("zbv", pp, microbatches, 2, Placement::V);
  for (int rank = 0; rank < pp; ++rank) {
    const int c0 = rank, c1 = 2 * pp - 1 - rank;
    int f0 = 0, f1 = 0, i0 = 0, i1 = 0, w0 = 0, w1 = 0;
    std::vector<Action> actions;
    auto emit = [&](Op op, int stage, int& counter) { actions.push_back({op, stage, counter++}); };

    for (int k = 0; k < 2 * (pp - rank) - 1; ++k) emit(Op::F, c0, f0);
    for (int k = 0; k < rank; ++k) {
      emit(Op::F, c1, f1);
      emit(Op::F, c0, f0);
    }
    for (int k = 0; k < pp - rank; ++k) {
      emit(Op::F, c1, f1);
      emit(Op::I, c1, i1);
      emit(Op::W, c1, w1);
    }
    while (f1 < f0 || f0 < built) {
      if (f0 < built) emit(Op::F, c0, f0);
      emit(Op::I, c0, i0);
      emit(Op::W, c0, w0);
      emit(Op::F, c1, f1);
      emit(Op::I, c1, i1);
      emit(Op::W, c1, w1);
    }
    for (int k = 0; k < rank; ++k) {
      emit(Op::I, c0, i0);
      emit(Op::I, c1, i1);
    }
    for (int k = 0; k < pp - rank; ++k) {
      emit(Op::I, c0, i0);
      emit(Op::W, c0, w0);
    }
    while (w1 < i1) emit(Op::W, c1, w1);
    while (w0 < i0) emit(Op::W, c0, w0);
    PPTRAIN_CHECK(f0 == built && f1 == built && i0 == built && i1 == built && w0 == built &&
                  w1 == built);

    for (const Action& a : actions)
      if (a.microbatch < microbatches) s.program[rank].push_back(a);
  }
  return s;
}

}  // namespace pptrain::pipeline
