// Trainer: one rank's part of a training run. On the stages, program and groups of its Job
// it builds the executors, the optimizer and the data streams, and runs steps:
//   1. zero gradients; read this DP replica's microbatches;
//   2. run the lowered pipeline program (forward, dgrad, wgrad, transfers);
//   3. sum the tied-embedding gradient over the embedding group (first and last stage);
//   4. sum gradients over the dp group (the loss is pre-scaled by 1/tokens of the global
//      batch, so the sum is the mean-loss gradient);
//   5. global gradient norm (each element counted once), AdamW on the fp32 masters with
//      the clip factor applied as it reads the gradients (under bf16 it also writes the
//      bf16 copies the layers compute with; masters written otherwise are re-rounded
//      before the next step).
// A step whose loss or gradient norm is not finite is never applied: training.on_nonfinite
// stop throws (naming the step and the first tensor with a non-finite gradient), skip
// drops the update (the data position advances) up to training.max_skipped in a row.
// The stop requests of StopSignals ride in the loss and norm all-reduces, so every rank
// learns of a signal that reached any rank in the same step (StepResult::stop_signal).
// A single process is the same path with groups of one and a one-rank program.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "core/config.h"
#include "core/faults.h"
#include "data/token_dataset.h"
#include "job/job.h"
#include "model/stage.h"
#include "parallel/parallel_context.h"
#include "pipeline/ir.h"
#include "runtime/executor.h"
#include "runtime/timeline.h"
#include "runtime/watchdog.h"
#include "train/adamw.h"

namespace pptrain {

struct StepResult {
  int step = 0;            // 1-based number of the step just taken
  double loss = 0;         // mean over the global batch's tokens
  double grad_norm = 0;    // before clipping
  double lr = 0;
  double ms = 0;           // wall time of the step on this rank
  double bubble = 0;       // measured idle fraction of the pipeline phase, mean over pp ranks
  bool skipped = false;    // non-finite loss or gradient norm: no update (on_nonfinite: skip)
  int skipped_total = 0;   // steps skipped so far by this process
  int stop_signal = 0;     // a stop signal some rank received (StopSignals), agreed by all; 0: none
};

class Trainer {
 public:
  // `job` must outlive the trainer.
  explicit Trainer(Job& job);
  ~Trainer();

  StepResult train_step();
  double evaluate();  // mean validation loss over training.eval_batches batches
  // bf16 models: rounds the fp32 masters whose bf16 copies are stale (initialisation,
  // checkpoint loads; AdamW keeps them current) into the copies the layers compute with.
  // Called before every step and evaluation.
  void refresh_working_weights();
  int step() const { return step_; }
  void set_step(int s) { step_ = s; }

  const Config& config() const { return cfg_; }
  const ParallelContext& parallel() const { return par_; }
  ParamStore& params() { return job_.params(); }
  AdamW& optimizer() { return *optimizer_; }
  const Timeline& timeline() const { return timeline_; }
  // Reports progress to the watchdog from the executors and the trainer's collectives and
  // data reads (runtime/watchdog.h); nullptr: none. `progress` must outlive the steps.
  void set_progress(Progress* progress);
  // Loss of the most recent step's microbatches, summed on this rank (tests).
  double last_local_loss_sum() const { return last_local_loss_; }

 private:
  void load_microbatches(const data::TokenDataset& ds, uint64_t batch_index);
  void plant_gradient_faults();
  void reduce_gradients();
  // `stop_requests` (nullptr: none): per StopSignals::kSignals, in: after mean_loss, out:
  // summed over the whole world (> 0 on every rank when any rank received that signal).
  double gradient_norm(double* stop_requests = nullptr);
  // `stop_requests`: in: this rank's (0 or 1 each), out: summed over its pp and dp groups.
  double mean_loss(double local_loss_sum, double* stop_requests = nullptr);
  // Collective over the world, entered by every rank together after a non-finite loss or
  // norm: the name of the first tensor (in layer order) with a non-finite gradient on any
  // rank, the same on every rank; "" when every gradient is finite.
  std::string first_nonfinite_gradient();
  // After a non-finite loss or norm: throws (stop), or counts the skip and warns (skip).
  void handle_nonfinite(StepResult& r);
  // Before a collective or other wait on other ranks, for the watchdog.
  void waiting_for(const char* what);
  void tick() { if (progress_) progress_->tick(); }

  Job& job_;
  const Config& cfg_;
  const ParallelContext& par_;
  Ops& ops_;
  const Faults& faults_;
  int step_ = 0;
  pipeline::Schedule eval_schedule_;
  std::unique_ptr<PipelineExecutor> train_exec_, eval_exec_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<data::TokenDataset> train_data_, val_data_;
  std::vector<Buffer<int32_t>> tokens_, targets_;   // [B·T] per microbatch
  std::vector<MicrobatchData> microbatches_;
  std::vector<int32_t> host_tokens_, host_targets_;
  Timeline timeline_;
  double last_local_loss_ = 0;
  int skipped_in_a_row_ = 0, skipped_total_ = 0;
  Progress* progress_ = nullptr;
};

}  // namespace pptrain
