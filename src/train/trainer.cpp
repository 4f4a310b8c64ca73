#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <type_traits>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/generators.h"
#include "pipeline/registry.h"
#include "train/lr_schedule.h"
#include "train/stop_signals.h"

namespace pptrain {
namespace {

// A tensor's place in the model's layer order: the embeddings, block 0, 1, ..., the final
// norm. Every rank computes it from the global name alone, so ranks can agree on "first".
int layer_order(const std::string& name, int n_layer) {
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0) return 0;
  if (name.rfind("h.", 0) == 0) return 1 + std::atoi(name.c_str() + 2);
  if (name.rfind("ln_f.", 0) == 0) return n_layer + 1;
  return n_layer + 2;
}

// The factor AdamW multiplies the gradients by: the global norm clipped to grad_clip.
float clip_factor(double grad_norm, double grad_clip) {
  return grad_clip > 0 && grad_norm > grad_clip ? float(grad_clip / (grad_norm + 1e-6)) : 1.0f;
}

}  // namespace

Trainer::Trainer(Job& job)
    : job_(job), cfg_(job.config()), par_(job.parallel()), ops_(job.ops()), faults_(job.faults()) {
  const auto& pc = cfg_.parallel;
  eval_schedule_ = pipeline::make_forward_only(job.schedule());
  std::map<int, Stage*> mine;
  for (const auto& stage : job.stages()) mine[stage->spec().index] = stage.get();
  train_exec_ =
      std::make_unique<PipelineExecutor>(ops_, mine, job.schedule(), par_.pp_rank, *par_.pp_comm, faults_);
  eval_exec_ = std::make_unique<PipelineExecutor>(ops_, mine, eval_schedule_, par_.pp_rank, *par_.pp_comm);
  TrainingConfig optim = cfg_.training;
  if (faults_.find("skip_weight_decay")) optim.weight_decay = 0.0;
  // ZeRO-1 shards the moments over the dp ranks; with one replica there is nothing to shard.
  if (pc.zero == 1 && pc.dp == 1 && job.world().rank() == 0)
    log::info("parallel.zero: 1 with dp 1 changes nothing (the one replica holds every moment)");
  const int shard = zero() ? par_.dp_rank : -1;
  // ZeRO-1 under bf16: the Job flattened the masters to this dp rank's range, the moments'.
  PPTRAIN_CHECK(job.params().masters_sharded() == (zero() && cfg_.precision() == Precision::bf16),
                "the parameters' masters are ", job.params().masters_sharded() ? "" : "not ",
                "sharded, but parallel.zero is ", pc.zero, " with dp ", pc.dp, " and training.precision ",
                cfg_.training.precision);
  optimizer_ = zero() ? std::make_unique<AdamW>(job.params(), optim, shard) : std::make_unique<AdamW>(job.params(), optim);
  if (cfg_.training.post_validation)
    backup_ = std::make_unique<UpdateBackup>(job.params(), *optimizer_, shard);
  if (zero()) {
    zero_ = std::make_unique<ZeroBuckets>(job.params(), *par_.dp_comm, timeline_);
    // A stage's reduce-scatter starts after its last W, unless a planted fault is still to
    // act on the gradients after the pipeline (plant_gradient_faults).
    const bool gradient_faults = faults_.find("grad_scale") || faults_.find("nan_grad");
    PipelineExecutor::StageHooks hooks;
    hooks.before_first_forward = [this](int stage) {
      waiting_for("the all-gathers of a stage's weights over the dp group (ZeRO-1)");
      zero_->finish_gathers(stage);
      tick();
    };
    if (!gradient_faults) hooks.after_last_backward = [this](int stage) { zero_->start_reduction(stage); };
    train_exec_->set_stage_hooks(std::move(hooks));
  }

  const int m = pc.microbatches, bt = cfg_.training.micro_batch_size * cfg_.model.seq_len;  // B·T tokens
  batch_ = Buffer<int32_t>(ops_, 2 * size_t(m) * bt);
  host_batch_.resize(batch_.size());
  for (int i = 0; i < m; ++i)
    microbatches_.push_back({batch_.data() + size_t(i) * bt, batch_.data() + size_t(m + i) * bt});
  // Only the ranks with the first or last stage read data.
  if (job.holds_stage(0) || job.holds_stage(cfg_.total_stages() - 1)) {
    if (cfg_.data.train.empty()) fail(cfg_.source, ": key 'data.train': a glob of token shards is required");
    train_data_ = std::make_unique<data::TokenDataset>(cfg_.data.train, cfg_.model.seq_len, cfg_.model.vocab_size,
                                                       "data.train", cfg_.data.shuffle, cfg_.training.seed);
    if (!cfg_.data.val.empty() && cfg_.training.eval_every > 0 && cfg_.training.eval_batches > 0)
      val_data_ = std::make_unique<data::TokenDataset>(cfg_.data.val, cfg_.model.seq_len, cfg_.model.vocab_size,
                                                       "data.val", false, cfg_.training.seed);
  }
}

Trainer::~Trainer() = default;

ParamStore& Trainer::params() {
  if (zero_) zero_->finish_gathers();
  return job_.params();
}

void Trainer::set_progress(Progress* progress) {
  progress_ = progress;
  train_exec_->set_progress(progress);
  eval_exec_->set_progress(progress);
}

void Trainer::waiting_for(const char* what) {
  if (progress_) progress_->set_activity(cat("waits for ", what));
}

void Trainer::load_microbatches(const data::TokenDataset& ds, uint64_t batch_index) {
  const auto& pc = cfg_.parallel;
  const size_t bt = size_t(cfg_.training.micro_batch_size) * cfg_.model.seq_len, m = size_t(pc.microbatches);
  for (size_t mb = 0; mb < m; ++mb) {
    data::read_microbatch(ds, batch_index, par_.dp_rank, pc.dp, int(mb), pc.microbatches,
                          cfg_.training.micro_batch_size, host_batch_.data() + mb * bt,
                          host_batch_.data() + (m + mb) * bt);
    tick();
  }
  batch_.upload(host_batch_.data());
}

double Trainer::tokens_per_step() const {
  return double(cfg_.global_batch_sequences()) * cfg_.model.seq_len;
}

bool Trainer::counts_loss() const {
  return par_.tp_rank == 0 && job_.holds_stage(cfg_.total_stages() - 1);
}

double Trainer::mean_loss(double local_loss_sum) {
  StepContribution mine;
  mine.loss_sum = counts_loss() ? local_loss_sum : 0.0;
  waiting_for("the gather of the loss over the world");
  const std::vector<double> all = job_.world().allgather(pack(mine));
  tick();
  return fold(all, tokens_per_step()).loss;
}

void Trainer::plant_gradient_faults() {
  for (const Fault* f : faults_.find_all("grad_scale"))
    if (Param* p = job_.params().find(f->target)) ops_.scale(p->grad.data(), float(*f->value), p->numel());
  for (const Fault* f : faults_.find_all("nan_grad"))  // value: the 1-based step
    if (Param* p = job_.params().find(f->target); p && int(*f->value) == step_ + 1)
      ops_.scale(p->grad.data(), NAN, p->numel());
}

void Trainer::reduce_gradients() {
  // The tied embedding: first and last stage each accumulated part of its gradient.
  waiting_for("the all-reduce of the gradients over the embedding and dp groups");
  if (Param* wte = job_.params().find("wte.weight"); wte && par_.embedding_comm && par_.embedding_comm->size() > 1)
    par_.embedding_comm->allreduce(wte->grad.data(), wte->numel(), ReduceOp::Sum);
  // The gradient arena all-reduced in one collective (every replica holds the sum), or under
  // ZeRO-1 reduce-scattered per bucket (each dp rank holds the sums of its own parts only;
  // the stages' buckets started after their last W, the shared one starts here).
  ParamStore& params = job_.params();
  if (zero()) {
    waiting_for("the reduce-scatters of the gradients over the dp group");
    zero_->finish_reductions();
  } else if (par_.dp > 1) {
    par_.dp_comm->allreduce(params.grad_arena(), params.flat_layout().total(), ReduceOp::Sum);
  }
  tick();
}

void Trainer::gather_gradients() {
  if (!zero()) return;
  zero_->finish_gathers();  // the dp group's blocking collectives wait for its pending ones
  waiting_for("the all-gather of the gradients over the dp group");
  const FlatLayout& layout = job_.params().flat_layout();
  for (const FlatBucket& bucket : layout.buckets)
    par_.dp_comm->allgather(job_.params().grad_arena() + bucket.begin, bucket.shard_size);
  tick();
}

std::vector<std::pair<Param*, LocalRange>> Trainer::summed_gradients() {
  std::vector<std::pair<Param*, LocalRange>> out;
  for (auto& [name, p] : job_.params().all()) {
    const LocalRange r = zero() ? optimizer_->state().range(name) : LocalRange{0, p->numel()};
    if (!r.empty()) out.emplace_back(p.get(), r);
  }
  return out;
}

StepContribution Trainer::contribution(double bubble) {
  StepContribution mine;
  mine.loss_sum = counts_loss() ? last_local_loss_ : 0.0;
  mine.bubble = bubble;
  mine.mem_peak_bytes = double(ops_.memory_stats().peak);
  // A stop signal is read once per step and agreed through the reduction.
  for (int i = 0; i < kStopSignalCount; ++i)
    mine.stop_requests[i] = StopSignals::received() == StopSignals::kSignals[i] ? 1.0 : 0.0;
  // Each element of the global model counted once: dp replica 0 only (the replicas hold the
  // same summed gradients; under ZeRO-1 each dp rank its own range, the only part it holds
  // summed), tp-replicated tensors on tp rank 0 only, the tied embedding only on the rank of
  // stage 0 (Param::primary).
  // One reduction per run of such parts adjacent in the gradient arena (merged_flat_runs):
  // on GPUs a reduction per tensor waited for hundreds of results every step.
  if (par_.dp_rank != 0 && !zero()) return mine;
  std::vector<std::pair<const Param*, LocalRange>> parts;
  std::vector<const Param*> all;
  for (auto& [p, r] : summed_gradients())
    if (p->primary) parts.emplace_back(p, r);
  for (auto& [name, p] : job_.params().all()) all.push_back(p.get());
  float* arena = job_.params().grad_arena();
  for (const auto& [begin, end] : merged_flat_runs(parts, all)) mine.sum_squares += ops_.sum_squares(arena + begin, end - begin);
  return mine;
}

std::string Trainer::first_nonfinite_gradient() {
  // Local scan: this rank's first tensor in layer order with a non-finite gradient
  // (sum_squares accumulates in double, so it is non-finite exactly when an element is).
  int first = INT_MAX;
  std::string name;
  // Under ZeRO-1 the summed part of each tensor is the rank's range; the dp ranks together
  // scan every element.
  for (auto& [p, r] : summed_gradients()) {
    const int order = layer_order(p->spec.name, cfg_.model.n_layer);
    if (order < first && !std::isfinite(ops_.sum_squares(p->grad.data() + r.begin, r.size()))) {
      first = order;
      name = p->spec.name;
    }
  }
  // Agreement: the smallest layer position over the world, then the lowest world rank
  // holding a non-finite tensor there, which broadcasts its name.
  Communicator& world = job_.world();
  waiting_for("the agreement on the first non-finite gradient (world)");
  double least[1] = {-double(first)};  // max of the negated = min
  world.allreduce(least, 1, ReduceOp::Max);
  if (-least[0] >= double(INT_MAX)) return "";
  double root[1] = {first == int(-least[0]) ? -double(world.rank()) : -double(INT_MAX)};
  world.allreduce(root, 1, ReduceOp::Max);
  char text[256] = {};
  if (world.rank() == int(-root[0])) std::strncpy(text, name.c_str(), sizeof text - 1);
  world.broadcast(text, sizeof text, int(-root[0]));
  tick();
  return text;
}

void Trainer::handle_nonfinite(StepResult& r) {
  const auto& t = cfg_.training;
  const std::string tensor = first_nonfinite_gradient();
  const std::string what =
      cat("step ", r.step, ": loss ", r.loss, ", gradient norm ", r.grad_norm, " (not finite); ",
          tensor.empty() ? std::string("every gradient is finite") : "first non-finite gradient: " + tensor);
  if (t.on_nonfinite == "stop")
    fail(what, "; stopping without saving (training.on_nonfinite: stop; lower training.lr or set "
               "training.on_nonfinite: skip)");
  ++skipped_in_a_row_;
  ++skipped_total_;
  if (skipped_in_a_row_ > t.max_skipped)
    fail(what, "; ", skipped_in_a_row_, " non-finite steps in a row, more than training.max_skipped ",
         t.max_skipped, "; stopping without saving");
  if (job_.world().rank() == 0)
    log::warn(what, "; step skipped (", skipped_in_a_row_, " in a row, training.max_skipped ", t.max_skipped, ")");
  r.skipped = true;
}

void Trainer::begin_step() {
  if (progress_) progress_->set_step(step_ + 1);
  timeline_.start_step();
  if (train_data_) load_microbatches(*train_data_, uint64_t(step_ + data_offset_));
}

double Trainer::run_pipeline(double start_us) {
  job_.params().zero_grads();
  refresh_working_weights();
  const double busy_before = timeline_.busy_us();
  {
    // The weights stay as they are until the update: the backend may keep packed copies.
    WeightsHeld held(ops_, int(microbatches_.size()));
    last_local_loss_ = train_exec_->run(microbatches_, timeline_);
  }
  const double span_us = timeline_.now_us() - start_us;
  return span_us > 0 ? 1.0 - (timeline_.busy_us() - busy_before) / span_us : 0.0;
}

StepResult Trainer::next_result() const {
  const auto& t = cfg_.training;
  StepResult r;
  r.step = step_ + 1;
  r.lr = learning_rate(step_, t.steps, t.warmup_steps, t.lr, t.min_lr);
  return r;
}

std::optional<float> Trainer::validate(StepResult& r, const StepTotals& totals) {
  r.loss = totals.loss;
  r.grad_norm = totals.grad_norm;
  r.bubble = totals.bubble;
  r.stop_signal = totals.stop_signal;
  r.mem_peak_bytes = totals.mem_peak_bytes;
  r.mem_peak_bytes_ranks = totals.mem_peak_bytes_ranks;
  // The totals are the same bits on every rank, so every rank takes the same branch (a NaN
  // or inf on any rank makes the sums non-finite everywhere).
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) handle_nonfinite(r);
  else skipped_in_a_row_ = 0;
  r.skipped_total = skipped_total_;
  r.rollbacks_total = rollbacks_total_;
  if (r.skipped) return std::nullopt;
  return clip_factor(r.grad_norm, cfg_.training.grad_clip);
}

void Trainer::update(double lr, int step, float clip_scale, bool optimistic) {
  // Clipping is a factor AdamW applies as it reads each gradient (no pass of its own); the
  // gradients stay unclipped (parameter dumps show them so). The optimistic update writes
  // into the backup's buffers and exchanges them in: under ZeRO-1 the masters are then
  // gathered into the exchanged arena, and a rollback restores the full arena before it.
  if (zero_) zero_->finish_gathers();  // AdamW writes this rank's parts of the gathered arena
  // Planted fault spike_update:STEP:FACTOR: step STEP's learning rate times FACTOR, once per
  // process (a loss-spike rollback that trains the step again trains it normally).
  if (const Fault* f = faults_.find("spike_update"); f && !spike_planted_ && std::stoi(f->target) == step) {
    lr *= *f->value;
    spike_planted_ = true;
  }
  if (optimistic) backup_->update(lr, step, clip_scale);
  else optimizer_->step(lr, step, clip_scale);
  if (faults_.find("repeat_update")) optimizer_->step(lr, step, clip_scale);
  if (zero()) gather_weights();
}

void Trainer::gather_weights() {
  // Each dp rank updated its parts; once the gathers are done every rank holds the whole
  // step in what the layers compute with (ZeroBuckets says which arena).
  if (!faults_.find("zero_keep_stale")) return zero_->start_gathers();
  // The planted fault zero_keep_stale: the elements outside the rank's parts keep their
  // values from before the gather.
  ParamStore& params = job_.params();
  const FlatLayout& layout = params.flat_layout();
  auto gather_keeping_stale = [&](auto* arena) {
    using T = std::remove_pointer_t<decltype(arena)>;
    Buffer<T> stale(ops_, layout.total());
    ops_.copy(stale.data(), arena, layout.total() * sizeof(T));
    zero_->start_gathers();
    zero_->finish_gathers();
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      const size_t lo = layout.part_begin(int(b), par_.dp_rank), hi = lo + layout.buckets[b].shard_size;
      const size_t begin = layout.buckets[b].begin, end = begin + layout.buckets[b].shard_size * size_t(layout.shards);
      ops_.copy(arena + begin, stale.data() + begin, (lo - begin) * sizeof(T));
      ops_.copy(arena + hi, stale.data() + hi, (end - hi) * sizeof(T));
    }
  };
  if (params.masters_sharded()) gather_keeping_stale(params.bf16_arena());
  else gather_keeping_stale(params.value_arena());
}

std::optional<Buffer<float>> Trainer::gathered_masters() {
  ParamStore& params = job_.params();
  if (!params.masters_sharded()) return std::nullopt;
  zero_->finish_gathers();
  const FlatLayout& layout = params.flat_layout();
  Buffer<float> whole(ops_, layout.total());
  waiting_for("the all-gather of the masters over the dp group (parameter dump)");
  // Per bucket: this rank's part from its shard arena into its flat place, then gathered.
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const FlatBucket& bucket = layout.buckets[b];
    ops_.copy(whole.data() + layout.part_begin(int(b), par_.dp_rank), params.value_arena() + bucket.shard_begin,
              bucket.shard_size * sizeof(float));
    par_.dp_comm->allgather(whole.data() + bucket.begin, bucket.shard_size);
  }
  tick();
  return whole;
}

void Trainer::end_step(StepResult& r, double reduce_start_us) {
  ops_.synchronize();
  const double end_us = timeline_.now_us();
  timeline_.add("reduce+optimizer", reduce_start_us, end_us, false);
  timeline_ms_ = r.ms = end_us / 1000.0;
  step_ = r.step;
}

std::optional<StepResult> Trainer::train_step() {
  begin_step();
  double bubble = run_pipeline(0.0);
  std::optional<StepResult> settled;
  if (pending_) {
    const double start_us = timeline_.now_us();
    settled = settle_pending();
    timeline_.add(cat("settle step ", settled->step), start_us, timeline_.now_us(), false);
    // This step ran on parameters the rollback replaced: run it again on the same batch.
    if (settled->rolled_back) bubble = run_pipeline(timeline_.now_us());
  }
  const double reduce_start_us = timeline_.now_us();
  plant_gradient_faults();
  reduce_gradients();
  const StepContribution mine = contribution(bubble);
  StepResult r = next_result();
  if (!backup_) {  // synchronous
    waiting_for("the step reduction over the world");
    const StepTotals totals = fold(job_.world().allgather(pack(mine)), tokens_per_step());
    tick();
    if (const std::optional<float> clip_scale = validate(r, totals)) update(r.lr, r.step, *clip_scale);
    end_step(r, reduce_start_us);
    return r;
  }
  pending_ = Pending{r, job_.world().iallgather(pack(mine))};
  update(r.lr, r.step, 1.0f, true);  // the optimistic guess: finite, not clipped
  backup_->take_gradients();
  end_step(pending_->result, reduce_start_us);
  return settled;
}

StepResult Trainer::settle_pending() {
  Pending p = std::move(*pending_);
  pending_.reset();
  waiting_for("the step reduction of the previous step over the world");
  const StepTotals totals = fold(p.reduction->wait(), tokens_per_step());
  tick();
  StepResult& r = p.result;
  const bool guess_holds = std::isfinite(totals.loss) && std::isfinite(totals.grad_norm) &&
                           clip_factor(totals.grad_norm, cfg_.training.grad_clip) == 1.0f;
  if (guess_holds) validate(r, totals);
  else roll_back(r, totals);
  return r;
}

void Trainer::roll_back(StepResult& r, const StepTotals& totals) {
  // The state before the optimistic update, gradients included: exactly where the
  // synchronous path decides. A non-finite step is then named, skipped or stopped as there.
  // ZeRO-1: the collectives the pipeline started on the arenas about to change hands end
  // first (the pipeline runs again).
  if (zero_) zero_->drain();
  backup_->restore();
  r.rolled_back = true;
  ++rollbacks_total_;
  const std::optional<float> clip_scale = validate(r, totals);
  // The redone update rewrites every bf16 copy (AdamW the range's, the gather the rest).
  // Without one, under sharded masters the restore re-rounded this rank's range only: the
  // other ranks' restored copies are gathered (every rank rolls back together).
  if (clip_scale) update(r.lr, r.step, *clip_scale);
  else if (job_.params().masters_sharded()) gather_weights();
  if (job_.world().rank() == 0)
    log::info("step ", r.step, ": post-validation rolled back the optimistic update (",
              clip_scale ? cat("gradient norm ", r.grad_norm, " > training.grad_clip ", cfg_.training.grad_clip,
                               "; redone clipped")
                         : std::string("loss or gradient norm not finite; update dropped"),
              "), rollback ", rollbacks_total_);
}

std::optional<StepResult> Trainer::settle() {
  if (!pending_) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  StepResult r = settle_pending();
  // No pipeline ran since the update: the step's gradients go back to the parameters, where
  // the synchronous path leaves them (parameter dumps read them). A rollback put them back.
  if (!r.rolled_back) backup_->return_gradients();
  ops_.synchronize();
  r.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void Trainer::refresh_working_weights() {
  if (cfg_.precision() != Precision::bf16) return;
  // AdamW writes the copies with each update; only masters written otherwise are rounded
  // here. The fault re-rounds every copy: the reference the fused copies must equal.
  if (faults_.find("refresh_bf16")) job_.params().refresh_bf16();
  else job_.params().refresh_stale_bf16();
}

double Trainer::evaluate() {
  PPTRAIN_CHECK(!pending_, "Trainer::evaluate needs a settled step (Trainer::settle)");
  if (cfg_.data.val.empty() || cfg_.training.eval_batches == 0) return NAN;
  if (zero_) zero_->finish_gathers();
  double total = 0;
  Timeline scratch;
  refresh_working_weights();
  // The weights stay as they are through every batch: the backend may keep packed copies.
  WeightsHeld held(ops_, int(microbatches_.size()) * cfg_.training.eval_batches);
  for (int b = 0; b < cfg_.training.eval_batches; ++b) {
    if (val_data_) load_microbatches(*val_data_, uint64_t(b));
    const double local = eval_exec_->run(microbatches_, scratch);
    eval_exec_->discard(cfg_.parallel.microbatches);
    total += mean_loss(local);
    tick();
  }
  return total / cfg_.training.eval_batches;
}

}  // namespace pptrain
