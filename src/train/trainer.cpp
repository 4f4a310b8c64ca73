#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/generators.h"
#include "pipeline/registry.h"
#include "train/lr_schedule.h"

namespace pptrain {

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
  optimizer_ = std::make_unique<AdamW>(job.params(), optim);

  const int m = pc.microbatches, bt = cfg_.training.micro_batch_size * cfg_.model.seq_len;  // B·T tokens
  for (int i = 0; i < m; ++i) {
    tokens_.emplace_back(ops_, bt);
    targets_.emplace_back(ops_, bt);
    microbatches_.push_back({tokens_.back().data(), targets_.back().data()});
  }
  host_tokens_.resize(bt);
  host_targets_.resize(bt);
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

void Trainer::load_microbatches(const data::TokenDataset& ds, uint64_t batch_index) {
  const auto& pc = cfg_.parallel;
  for (int mb = 0; mb < pc.microbatches; ++mb) {
    data::read_microbatch(ds, batch_index, par_.dp_rank, pc.dp, mb, pc.microbatches,
                          cfg_.training.micro_batch_size, host_tokens_.data(), host_targets_.data());
    tokens_[mb].upload(host_tokens_.data());
    targets_[mb].upload(host_targets_.data());
  }
}

double Trainer::mean_loss(double local_loss_sum) {
  double v = local_loss_sum;  // non-zero only on the last stage's ranks
  par_.pp_comm->allreduce(&v, 1, ReduceOp::Sum);
  par_.dp_comm->allreduce(&v, 1, ReduceOp::Sum);
  return v / (double(cfg_.global_batch_sequences()) * cfg_.model.seq_len);
}

void Trainer::plant_gradient_faults() {
  for (const Fault* f : faults_.find_all("grad_scale"))
    if (Param* p = job_.params().find(f->target)) ops_.scale(p->grad.data(), float(*f->value), p->numel());
}

void Trainer::reduce_gradients() {
  // The tied embedding: first and last stage each accumulated part of its gradient.
  if (Param* wte = job_.params().find("wte.weight"); wte && par_.embedding_comm && par_.embedding_comm->size() > 1)
    par_.embedding_comm->allreduce(wte->grad.data(), wte->numel(), ReduceOp::Sum);
  if (par_.dp > 1)
    for (auto& [name, p] : job_.params().all()) par_.dp_comm->allreduce(p->grad.data(), p->numel(), ReduceOp::Sum);
}

double Trainer::gradient_norm() {
  // Each element of the global model counted once: tp-replicated tensors on tp rank 0
  // only, the tied embedding only on the rank of stage 0.
  double local = 0;
  for (auto& [name, p] : job_.params().all()) {
    if (p->replicated_over_tp && par_.tp_rank != 0) continue;
    if (name == "wte.weight" && !job_.holds_stage(0)) continue;
    local += ops_.sum_squares(p->grad.data(), p->numel());
  }
  par_.tp_comm->allreduce(&local, 1, ReduceOp::Sum);
  par_.pp_comm->allreduce(&local, 1, ReduceOp::Sum);
  return std::sqrt(local);
}

StepResult Trainer::train_step() {
  const auto& t = cfg_.training;
  timeline_.start_step();
  job_.params().zero_grads();
  refresh_working_weights();
  if (train_data_) load_microbatches(*train_data_, uint64_t(step_));
  last_local_loss_ = train_exec_->run(microbatches_, timeline_);
  const double pipeline_us = timeline_.now_us();
  double bubble = pipeline_us > 0 ? 1.0 - timeline_.busy_us() / pipeline_us : 0.0;

  StepResult r;
  r.loss = mean_loss(last_local_loss_);
  plant_gradient_faults();
  reduce_gradients();
  r.grad_norm = gradient_norm();
  // Clipping is a factor AdamW applies as it reads each gradient (no pass of its own); the
  // gradients stay unclipped (parameter dumps show them so).
  float clip_scale = 1.0f;
  if (t.grad_clip > 0 && r.grad_norm > t.grad_clip) clip_scale = float(t.grad_clip / (r.grad_norm + 1e-6));
  r.lr = learning_rate(step_, t.steps, t.warmup_steps, t.lr, t.min_lr);
  optimizer_->step(r.lr, step_ + 1, clip_scale);
  if (faults_.find("repeat_update")) optimizer_->step(r.lr, step_ + 1, clip_scale);
  ops_.synchronize();
  const double end_us = timeline_.now_us();
  timeline_.add("reduce+optimizer", pipeline_us, end_us, false);
  par_.pp_comm->allreduce(&bubble, 1, ReduceOp::Sum);
  r.bubble = bubble / par_.pp;
  r.ms = end_us / 1000.0;
  r.step = ++step_;
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
  if (cfg_.data.val.empty() || cfg_.training.eval_batches == 0) return NAN;
  double total = 0;
  Timeline scratch;
  refresh_working_weights();
  for (int b = 0; b < cfg_.training.eval_batches; ++b) {
    if (val_data_) load_microbatches(*val_data_, uint64_t(b));
    double local = eval_exec_->run(microbatches_, scratch);
    eval_exec_->discard(cfg_.parallel.microbatches);
    total += mean_loss(local);
  }
  return total / cfg_.training.eval_batches;
}

}  // namespace pptrain
