// The step reduction: the scalars of one training step that every rank must agree on —
// the loss, the global gradient norm, the measured bubble, the stop requests and each
// rank's allocator peak — in ONE
// collective over the world. Each rank contributes a few doubles (MPI_Allgather, or
// MPI_Iallgather under post-validation) and every rank folds all of them in world-rank
// order, so the totals are the same bits on every rank, independent of MPI's reduction
// algorithm, and the synchronous path and post-validation (which waits for the gather one
// step later) compute the same bits.
//
// Counting rules, so that each global quantity is counted once:
//   loss_sum     the summed loss of this rank's microbatches, from tp rank 0 of the ranks
//                holding the last stage only (the vocab-parallel head gives every tp rank
//                the whole loss; dp replicas hold disjoint microbatches and all count);
//   sum_squares  from dp rank 0 only (after the dp all-reduce every replica holds the same
//                gradients), with the norm's own rules (Trainer: tp-replicated tensors on
//                tp rank 0, the tied embedding on the stage-0 rank);
//   bubble       every rank; the total is the mean over the world;
//   stop         every rank, 1 per signal of StopSignals::kSignals it received; summed;
//   mem_peak     every rank, its backend's peak bytes in use (Ops::memory_stats) since the
//                last logged step; folded with max, and kept per rank.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace pptrain {

inline constexpr int kStopSignalCount = 3;  // StopSignals::kSignals

struct StepContribution {
  double loss_sum = 0;
  double sum_squares = 0;
  double bubble = 0;
  std::array<double, kStopSignalCount> stop_requests{};  // 0 or 1, in StopSignals::kSignals order
  double mem_peak_bytes = 0;
};

struct StepTotals {
  double loss = 0;       // mean over the global batch's tokens
  double grad_norm = 0;  // before clipping
  double bubble = 0;     // mean over the world's ranks
  int stop_signal = 0;   // the first signal of StopSignals::kSignals some rank received; 0: none
  double mem_peak_bytes = 0;                 // max over the world's ranks
  std::vector<double> mem_peak_bytes_ranks;  // [world size], by world rank
};

// [kContributionSize]: loss_sum, sum_squares, bubble, stop requests, mem_peak.
inline constexpr int kContributionSize = 4 + kStopSignalCount;
std::vector<double> pack(const StepContribution& c);

// `gathered`: [world size · kContributionSize], world rank r's contribution at
// [r · kContributionSize, ...). `tokens`: of the global batch (the loss's divisor).
StepTotals fold(const std::vector<double>& gathered, double tokens);

}  // namespace pptrain
