// ZeroBuckets: ZeRO-1's collectives over the dp group, one reduce-scatter of the gradients
// and one all-gather of the updated weights per bucket of the flat arenas (model/param.h:
// one bucket per stage the rank holds, one of the tensors several stages use), each started
// as soon as its data is ready and waited for only where its result is needed:
//   - a stage's gradients are complete after its last W (or B) on this rank: its
//     reduce-scatter starts there (PipelineExecutor's stage hooks) and runs while the rest
//     of the step does (the other stage's W under a V or loop placement, the sends, the
//     tied embedding's all-reduce); the optimizer waits for all of them;
//   - after the update every bucket's all-gather starts at once, and the next step waits
//     for a stage's (and the shared bucket's) only before that stage's first F, so the
//     gathers overlap the next step's start: reading its data, the warm-up's waits for
//     activations on later pp ranks, and under post-validation whatever the previous step
//     still had to do.
// The shared bucket (the tied embedding under pp > 1 or several stages per rank) is
// reduced last, after the embedding group's all-reduce (Trainer::reduce_gradients).
// Every dp rank runs the same program, so all start the same buckets' collectives in the
// same order, which MPI and NCCL require. What is gathered is what the layers compute
// with: the bf16 copies under bf16 (the masters are sharded), else the fp32 masters.
// Collectives move the same bits as one collective over the whole arena: the sums of a
// reduce-scatter are per element, and an all-gather only copies.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "model/param.h"
#include "runtime/timeline.h"

namespace pptrain {

class ZeroBuckets {
 public:
  // `params` must be flat, with dp.size() shards; all three outlive this object.
  ZeroBuckets(ParamStore& params, Communicator& dp, Timeline& timeline);
  // Waits for the pending collectives unless the stack is unwinding (an error: then they
  // are left to the communicator, which warns).
  ~ZeroBuckets();
  ZeroBuckets(const ZeroBuckets&) = delete;
  ZeroBuckets& operator=(const ZeroBuckets&) = delete;

  // `stage`'s gradients are complete on this rank: starts its bucket's reduce-scatter.
  void start_reduction(int stage);
  // Starts the reduce-scatters not started yet, then waits for every one: each dp rank then
  // holds the sums of its parts of every bucket.
  void finish_reductions();
  // Starts the all-gather of every bucket (after the update of this rank's parts).
  void start_gathers();
  // Waits for the all-gathers of the buckets `stage` computes with: its own and the shared.
  void finish_gathers(int stage);
  // Waits for every pending all-gather: the weights are whole again.
  void finish_gathers();
  bool gathers_pending() const;
  // Waits for every collective started and drops the reductions' results, starting none
  // (post-validation's rollback: the step's pipeline runs again).
  void drain();

 private:
  // The buckets holding `stage`'s tensors and the shared ones.
  std::vector<int> buckets_of(int stage) const;
  std::string bucket_name(size_t b) const;  // "stage 3" or "shared", for the trace
  // Starts bucket b's reduce-scatter and notes when, for its span in the trace.
  void start_bucket_reduction(size_t b);
  // Waits for `request` if pending, with the wait as a span of the trace named `what`.
  void wait(std::unique_ptr<Request>& request, const std::string& what);
  static void wait_all(std::vector<std::unique_ptr<Request>>& requests);  // the pending ones

  ParamStore& params_;
  Communicator& dp_;
  Timeline& timeline_;
  std::vector<std::unique_ptr<Request>> reductions_, gathers_;  // per bucket; null: none pending
  std::vector<double> reduction_start_us_;                      // per bucket, on the step's timeline
};

}  // namespace pptrain
