// Interleaved 1F1B (Megatron-LM, Narayanan et al., 2021), depth first. Loop placement with
// v >= 2 stages ("chunks") per rank: rank r holds stages r, p+r, ..., (v-1)p+r.
//
// Every rank walks the same order of (chunk, microbatch) "virtual microbatches": the
// microbatches are taken in rounds of G; inside a round, chunk 0 runs the round's G
// microbatches, then chunk 1 runs them, ... The backward order is the same with the chunks
// reversed. Rank r runs 2(p-1-r) + (v-1)G warm-up forwards (enough for microbatch 0 to
// reach the last stage and its gradient to come back), then alternates one forward and
// one backward, then drains the backwards.
//
// Megatron uses G = p and requires m % p == 0. What the 1F1B phase needs is only that
// every round has the same size G >= p, so G here is the smallest divisor of m that is
// >= min(p, m): m = 12, p = 4 gives G = 4 (Megatron's schedule); m = 9 gives one round of
// 9; m < p gives one round of m. Bubble (p-1)(T_F+T_B)/v for m >= p; a larger G costs
// (v-1)(G-p) more chunk activations in flight.
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

Schedule make_interleaved_1f1b(int pp, int microbatches, int stages_per_rank) {
  if (stages_per_rank < 2)
    fail("interleaved-1f1b needs at least 2 stages per rank (got ", stages_per_rank,
         "; 1f1b is the 1-stage case)");
  const int v = stages_per_rank;
  int round = std::min(pp, microbatches);
  while (microbatches % round != 0) ++round;

  // (chunk, microbatch) in the order every rank runs its forwards.
  std::vector<std::pair<int, int>> order;
  for (int first = 0; first < microbatches; first += round)
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = first; mb < first + round; ++mb) order.push_back({chunk, mb});
  const int total = microbatches * v;

  Schedule s = empty_schedule("interleaved-1f1b", pp, microbatches, v, Placement::Loop);
  for (int rank = 0; rank < pp; ++rank) {
    auto forward = [&](int k) {
      return Action{Op::F, order[k].first * pp + rank, order[k].second};
    };
    auto backward = [&](int k) {
      return Action{Op::B, (v - 1 - order[k].first) * pp + rank, order[k].second};
    };
    auto& actions = s.program[rank];
    int warmup = std::min(2 * (pp - 1 - rank) + (v - 1) * round, total);
    for (int k = 0; k < warmup; ++k) actions.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
      actions.push_back(forward(warmup + k));
      actions.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k) actions.push_back(backward(k));
  }
  return s;
}

}  // namespace pptrain::pipeline
