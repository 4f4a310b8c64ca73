// Trainer: one rank's part of a training run. On the stages, program and groups of its Job
// it builds the executors, the optimizer and the data streams, and runs steps:
//   1. zero gradients; read this DP replica's microbatches;
//   2. run the lowered pipeline program (forward, dgrad, wgrad, transfers);
//   3. sum the tied-embedding gradient over the embedding group (first and last stage);
//   4. sum gradients over the dp group (the loss is pre-scaled by 1/tokens of the global
//      batch, so the sum is the mean-loss gradient): one all-reduce of the gradient arena
//      (ParamStore::flatten), or under ZeRO-1 (parallel.zero: 1) a reduce-scatter per
//      bucket that leaves each dp rank the sum over its 1/dp parts (train/zero_buckets.h:
//      a stage's starts after its last W in step 2, so it overlaps the step's rest);
//   5. the step reduction (train/step_reduction.h): loss, global gradient norm (each
//      element counted once), bubble and stop requests, one gather over the world folded
//      the same way on every rank;
//   6. AdamW on the fp32 masters with the clip factor applied as it reads the gradients
//      (under bf16 it also writes the bf16 copies the layers compute with; masters written
//      otherwise are re-rounded before the next step). ZeRO-1: AdamW updates the rank's
//      range only (its moments exist for that range only), then what the layers compute
//      with is all-gathered over the dp group: under bf16 the bf16 copies (the fp32
//      masters are sharded too: each rank holds its range's, Param::master_range), under
//      fp32 the masters (they are the weights, so they stay whole).
// A step whose loss or gradient norm is not finite is never applied: training.on_nonfinite
// stop throws (naming the step and the first tensor with a non-finite gradient), skip
// drops the update (the data position advances) up to training.max_skipped in a row.
// The stop requests of StopSignals ride in the step reduction, so every rank learns of a
// signal that reached any rank in the same step (StepResult::stop_signal).
//
// Post-validation (training.post_validation: true; the zero-bubble paper's): waiting for
// step 5 before step 6 makes every step end with a synchronisation of all ranks, so
// consecutive steps cannot overlap (a ZB-H2 pipeline's early ranks idle until the last
// finishes). Instead, step s starts its reduction without waiting, applies AdamW
// optimistically with clip factor 1 and returns, keeping what the update changed
// (train/update_backup.h: masters, gradients, moments; 16 bytes per parameter element held,
// none copied: AdamW writes out of place into a second set of buffers, exchanged with the
// first, and the old values are the backup). Step s + 1 runs its
// pipeline on those parameters and only then waits for step s's reduction. Almost always
// the guess holds (finite, norm within training.grad_clip) and nothing more happens; else
// the backup is restored, the update the synchronous path would have made is applied (the
// same clip factor, or none for a non-finite step, with the same stop or skip), and step
// s + 1 runs again on the same batch: a rollback, logged, counted in StepResult. Results
// are the same bits as synchronous training; they are only known one step later. Steps 3-4
// stay blocking: the update needs the summed gradients (with a tied embedding under loop
// placement they also synchronise the first and last pp rank every step).
// A single process is the same path with groups of one and a one-rank program.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "core/config.h"
#include "core/faults.h"
#include "data/token_dataset.h"
#include "job/job.h"
#include "model/stage.h"
#include "parallel/mpi_comm.h"
#include "parallel/parallel_context.h"
#include "pipeline/ir.h"
#include "runtime/executor.h"
#include "runtime/timeline.h"
#include "runtime/watchdog.h"
#include "train/adamw.h"
#include "train/step_reduction.h"
#include "train/update_backup.h"
#include "train/zero_buckets.h"

namespace pptrain {

struct StepResult {
  int step = 0;            // 1-based number of the step just taken
  double loss = 0;         // mean over the global batch's tokens
  double grad_norm = 0;    // before clipping
  double lr = 0;
  double ms = 0;           // wall time on this rank of the train_step call that ran the step
                           // (post-validation: with the settling of the step before it)
  double bubble = 0;       // measured idle fraction of the pipeline phase, mean over all ranks
  bool skipped = false;    // non-finite loss or gradient norm: no update (on_nonfinite: skip)
  int skipped_total = 0;   // steps skipped so far by this process
  int stop_signal = 0;     // a stop signal some rank received (StopSignals), agreed by all; 0: none
  bool rolled_back = false;  // post-validation: the optimistic update was undone and redone
  int rollbacks_total = 0;   // rollbacks so far by this process
  // The backends' peak bytes in use (Ops::memory_stats) since the last reset_peak_memory
  // (run_training resets after each logged step), read as the step's reduction starts:
  // the max over the world's ranks, and per world rank.
  double mem_peak_bytes = 0;
  std::vector<double> mem_peak_bytes_ranks;
};

class Trainer {
 public:
  // `job` must outlive the trainer.
  explicit Trainer(Job& job);
  ~Trainer();

  // Runs the next step. Synchronous: returns its result. Post-validation: applies its update
  // optimistically and returns without waiting for its reduction; what it returns is the
  // result of the step before, settled during this call (nullopt when none was pending).
  // Collective, like everything below that waits on other ranks.
  std::optional<StepResult> train_step();
  // Post-validation: waits for the pending step's reduction and settles the step (rolling
  // it back where validation fails), so that parameters and moments are exactly those
  // after step(); returns its result. nullopt when nothing is pending (always when
  // synchronous). Every rank must settle after the same step.
  std::optional<StepResult> settle();
  bool has_pending() const { return pending_.has_value(); }
  // Mean validation loss over training.eval_batches batches. Needs a settled state.
  double evaluate();
  // bf16 models: rounds the fp32 masters whose bf16 copies are stale (initialisation,
  // checkpoint loads; AdamW keeps them current) into the copies the layers compute with.
  // Called before every step and evaluation.
  void refresh_working_weights();
  // Steps taken, the pending one included.
  int step() const { return step_; }
  void set_step(int s) { step_ = s; }
  // Global batches skipped by loss-spike rollbacks (CheckpointManager::data_offset): step
  // s + 1 reads training batch s + offset.
  void set_data_offset(int64_t offset) { data_offset_ = offset; }

  const Config& config() const { return cfg_; }
  const ParallelContext& parallel() const { return par_; }
  // Complete: waits for ZeRO-1's pending all-gathers first.
  ParamStore& params();
  AdamW& optimizer() { return *optimizer_; }
  // parallel.zero: 1 with dp > 1: the moments are sharded over the dp ranks (and under
  // bf16 the masters: ParamStore::masters_sharded).
  bool zero() const { return cfg_.zero_shards_moments(); }
  // ZeRO-1 leaves each dp rank the summed gradients of its own range only; this all-gathers
  // the rest (collective over the dp group; for parameter dumps, which show every summed
  // gradient). Nothing to do otherwise.
  void gather_gradients();
  // Under sharded masters (ZeRO-1 under bf16): every rank's range of the masters in a
  // temporary [flat_layout().total()] arena (collective over the dp group; for parameter
  // dumps). nullopt otherwise: every rank holds its masters whole.
  std::optional<Buffer<float>> gathered_masters();
  // The measured actions of the last train_step call and its wall time.
  const Timeline& timeline() const { return timeline_; }
  double timeline_ms() const { return timeline_ms_; }
  // Reports progress to the watchdog from the executors and the trainer's collectives and
  // data reads (runtime/watchdog.h); nullptr: none. `progress` must outlive the steps.
  void set_progress(Progress* progress);
  // Loss of the most recent step's microbatches, summed on this rank (tests).
  double last_local_loss_sum() const { return last_local_loss_; }

 private:
  // A step whose update was applied optimistically and awaits its reduction.
  struct Pending {
    StepResult result;  // step, lr, ms; the rest once settled
    std::unique_ptr<PendingAllgather> reduction;
  };
  // Phases of a step, in order.
  void begin_step();
  void load_microbatches(const data::TokenDataset& ds, uint64_t batch_index);
  // Zero gradients, refresh bf16 copies, run the program. Returns the measured bubble of
  // the run: idle / time since `start_us` on the step's timeline.
  double run_pipeline(double start_us);
  void plant_gradient_faults();
  void reduce_gradients();
  // ZeRO-1: starts the all-gathers after the sharded update, of the bf16 copies (bf16:
  // masters sharded) or of the masters (fp32).
  void gather_weights();
  // The parameters whose summed gradients this rank holds, with the part of each that is
  // summed: every element (dp all-reduce), or under ZeRO-1 the part inside the rank's range.
  std::vector<std::pair<Param*, LocalRange>> summed_gradients();
  // This rank's part of the step reduction, by the counting rules of step_reduction.h.
  StepContribution contribution(double bubble);
  StepResult next_result() const;  // step and lr of the step about to be taken
  // The synchronous decision on a step whose totals are known, shared by both paths so
  // they agree bit for bit: fills `r`, handles a non-finite step (throws under stop) and
  // returns the clip factor of the update, or nullopt when the step is skipped.
  std::optional<float> validate(StepResult& r, const StepTotals& totals);
  // AdamW, then under ZeRO-1 the all-gather of the masters. `optimistic`: post-validation's
  // update, which keeps the values before it in the backup.
  void update(double lr, int step, float clip_scale, bool optimistic = false);
  void end_step(StepResult& r, double reduce_start_us);
  // Post-validation: waits for the pending step's reduction and settles it.
  StepResult settle_pending();
  void roll_back(StepResult& r, const StepTotals& totals);
  // Evaluation's loss: the step reduction with only the loss.
  double mean_loss(double local_loss_sum);
  double tokens_per_step() const;
  bool counts_loss() const;  // tp rank 0 of a rank holding the last stage
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
  int64_t data_offset_ = 0;
  bool spike_planted_ = false;  // the planted fault spike_update acted
  pipeline::Schedule eval_schedule_;
  std::unique_ptr<PipelineExecutor> train_exec_, eval_exec_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<data::TokenDataset> train_data_, val_data_;
  // The step's ids: [2, m, B·T], every microbatch's tokens, then every microbatch's targets,
  // read into the host copy and uploaded in one copy (one host wait a step, not two per
  // microbatch); microbatches_ point into it.
  Buffer<int32_t> batch_;
  std::vector<int32_t> host_batch_;
  std::vector<MicrobatchData> microbatches_;
  Timeline timeline_;
  double timeline_ms_ = 0;
  double last_local_loss_ = 0;
  int skipped_in_a_row_ = 0, skipped_total_ = 0, rollbacks_total_ = 0;
  std::unique_ptr<UpdateBackup> backup_;  // post-validation only
  std::unique_ptr<ZeroBuckets> zero_;     // ZeRO-1 only
  std::optional<Pending> pending_;
  Progress* progress_ = nullptr;
};

}  // namespace pptrain
