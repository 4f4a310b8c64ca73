// DualPipeV (DeepSeek's DualPipe folded into a V; "cut-in-half" DualPipe). V placement,
// 2 stages per rank as in ZB-V: c0 = stage r (down), c1 = stage 2p-1-r (up). In the main
// phase each F of one chunk is paired with the B of the other chunk, which DualPipe
// overlaps (one's communication hides behind the other's compute); here the pair is two
// consecutive actions. Some backwards near the ends are split (I now, W later) and their
// W's queue up (first in, first out) to fill the gaps. Following the reference's 8 phases:
//   1  2(p-r-1) x F(c0)
//   2  r+1 x [F(c0) F(c1)]
//   3  p-r-1 x [I(c1) W F(c1)]                  (W: the queue's oldest, here that I's)
//   4  m-2p+r+1 x [F(c0) B(c1) F(c1) B(c0)]      main phase
//   5  p-r-1 x [B(c1) F(c1) B(c0)]
//   6  r+1 x [B(c1) B(c0)], split from the middle step on ((r+1)/2): odd ranks switch
//      before B(c1), even ranks before B(c0)
//   7  p-r-1 x [W I(c0)]
//   8  the queued W's
// Needs m >= 2p-1 (phase 4 of rank 0 runs m-2p+1 times); the reference asks m >= 2p.
#include <deque>
#include <map>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_dualpipev(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank != 2)
    fail("dualpipev needs exactly 2 stages per rank (got ", stages_per_rank, ")");
  if (microbatches < 2 * pp - 1)
    fail("dualpipev needs at least 2*pp-1 microbatches (pp=", pp, ": >= ", 2 * pp - 1, ", got ",
         microbatches, ")");
  Schedule s = empty_schedule("dualpipev", pp, microbatches, 2, Placement::V);
  for (int rank = 0; rank < pp; ++rank) {
    const int c0 = rank, c1 = 2 * pp - 1 - rank;
    auto& actions = s.program[rank];
    std::map<int, int> next_forward, next_backward;  // stage -> next microbatch
    std::deque<Action> pending_weights;
    auto forward = [&](int stage) { actions.push_back({Op::F, stage, next_forward[stage]++}); };
    auto backward = [&](int stage, bool split) {
      int mb = next_backward[stage]++;
      if (!split) {
        actions.push_back({Op::B, stage, mb});
        return;
      }
      actions.push_back({Op::I, stage, mb});
      pending_weights.push_back({Op::W, stage, mb});
    };
    auto weight = [&]() {
      PPTRAIN_CHECK(!pending_weights.empty());
      actions.push_back(pending_weights.front());
      pending_weights.pop_front();
    };

    for (int k = 0; k < 2 * (pp - rank - 1); ++k) forward(c0);
    for (int k = 0; k < rank + 1; ++k) {
      forward(c0);
      forward(c1);
    }
    for (int k = 0; k < pp - rank - 1; ++k) {
      backward(c1, true);
      weight();
      forward(c1);
    }
    for (int k = 0; k < microbatches - 2 * pp + rank + 1; ++k) {
      forward(c0);
      backward(c1, false);
      forward(c1);
      backward(c0, false);
    }
    for (int k = 0; k < pp - rank - 1; ++k) {
      backward(c1, false);
      forward(c1);
      backward(c0, false);
    }
    const int drain = rank + 1;
    bool split = false;
    for (int k = 0; k < drain; ++k) {
      if (k == drain / 2 && rank % 2 == 1) split = true;
      backward(c1, split);
      if (k == drain / 2 && rank % 2 == 0) split = true;
      backward(c0, split);
    }
    for (int k = 0; k < pp - rank - 1; ++k) {
      weight();
      backward(c0, true);
    }
    while (!pending_weights.empty()) weight();
    PPTRAIN_CHECK(next_forward[c0] == microbatches && next_forward[c1] == microbatches &&
                  next_backward[c0] == microbatches && next_backward[c1] == microbatches);
  }
  return s;
}

}  // namespace pptrain::pipeline
