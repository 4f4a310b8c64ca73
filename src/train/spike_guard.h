// SpikeGuard: catches a finite divergence, which the non-finite checks cannot (at a too
// high learning rate the loss can climb to hundreds and stay finite, while keep_last
// prunes the good checkpoints). A step's loss L is a spike when
//
//   L > spike_factor * mean,   mean = exponential moving average of the earlier losses
//                              (weight 2 / (spike_window + 1) on the newest, the usual
//                              span-N average: about the last spike_window steps)
//
// once spike_window losses of this run have been seen (before that the mean is not yet a
// statistic). A spike's loss is not folded into the mean, so a run of spikes is judged
// against the losses before it. The loss is the same bits on every rank (the global mean),
// so every rank reaches the same verdict without a message. Checkpoints store the mean and
// its count, so a resumed run (and a rollback) judges its first steps against them.
#pragma once
#include <optional>
#include <string>

namespace pptrain {

class SpikeGuard {
 public:
  SpikeGuard(double factor, int window);
  // The running mean `loss` is a spike against, or nullopt when it is not one (it then
  // joins the mean).
  std::optional<double> check(double loss);
  // "MEAN COUNT" (the checkpoint attribute spike_guard), and back; restore("") starts afresh.
  std::string state() const;
  void restore(const std::string& state);
  double factor() const { return factor_; }
  int window() const { return window_; }

 private:
  double factor_;
  int window_;
  double alpha_;
  double mean_ = 0;
  int seen_ = 0;
};

}  // namespace pptrain
