#include "train/trainer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "partition/partition.h"
#include "pipeline/generators.h"
#include "pipeline/registry.h"
#include "train/lr_schedule.h"

namespace pptrain {

Trainer::Trainer(const Config& cfg, const ParallelContext& par, Ops& ops, const Faults& faults)
    : cfg_(cfg), par_(par), ops_(ops), faults_(faults) {
  const auto& pc = cfg.parallel;
  if (pc.pp != par.pp || pc.tp != par.tp || pc.dp != par.dp)
    fail(cfg.source, ": parallel layout ", pc.dp, "x", pc.pp, "x", pc.tp, " does not match the process grid");
  train_schedule_ = pipeline::prepare_schedule(cfg);
  eval_schedule_ = pipeline::make_forward_only(train_schedule_);

  const ModelDims dims = ModelDims::from(cfg.model, cfg.training.micro_batch_size, par.tp, par.tp_rank);
  params_ = std::make_unique<ParamStore>(ops, par.tp, par.tp_rank, cfg.training.seed);
  std::map<int, Stage*> mine;
  for (const StageSpec& spec : stage_specs(cfg)) {
    if (pipeline::rank_of_stage(train_schedule_.placement, spec.index, pc.pp) != par.pp_rank) continue;
    stages_.push_back(make_stage(*params_, dims, spec, *par.tp_comm, cfg.precision(), faults_));
    mine[spec.index] = stages_.back().get();
    if (spec.has_head) {
      const double tokens = double(cfg.global_batch_sequences()) * cfg.model.seq_len;
      stages_.back()->set_loss_scale(float(1.0 / tokens));
    }
  }
  train_exec_ = std::make_unique<PipelineExecutor>(ops, mine, train_schedule_, par.pp_rank, *par.pp_comm, faults_);
  eval_exec_ = std::make_unique<PipelineExecutor>(ops, mine, eval_schedule_, par.pp_rank, *par.pp_comm);
  TrainingConfig optim = cfg.training;
  if (faults_.find("skip_weight_decay")) optim.weight_decay = 0.0;
  optimizer_ = std::make_unique<AdamW>(*params_, optim);

  const int m = pc.microbatches, bt = dims.rows();
  for (int i = 0; i < m; ++i) {
    tokens_.emplace_back(ops, bt);
    targets_.emplace_back(ops, bt);
    microbatches_.push_back({tokens_.back().data(), targets_.back().data()});
  }
  host_tokens_.resize(bt);
  host_targets_.resize(bt);
  // Only the ranks with the first or last stage read data.
  if (holds_stage(0) || holds_stage(cfg.total_stages() - 1)) {
    if (cfg.data.train.empty()) fail(cfg.source, ": key 'data.train': a glob of token shards is required");
    train_data_ = std::make_unique<data::TokenDataset>(cfg.data.train, cfg.model.seq_len, cfg.model.vocab_size,
                                                       "data.train", cfg.data.shuffle, cfg.training.seed);
    if (!cfg.data.val.empty() && cfg.training.eval_every > 0 && cfg.training.eval_batches > 0)
      val_data_ = std::make_unique<data::TokenDataset>(cfg.data.val, cfg.model.seq_len, cfg.model.vocab_size,
                                                       "data.val", false, cfg.training.seed);
  }
}

Trainer::~Trainer() = default;

bool Trainer::holds_stage(int stage) const {
  return pipeline::rank_of_stage(train_schedule_.placement, stage, par_.pp) == par_.pp_rank;
}

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
    if (Param* p = params_->find(f->target)) ops_.scale(p->grad.data(), float(*f->value), p->numel());
}

void Trainer::reduce_gradients() {
  // The tied embedding: first and last stage each accumulated part of its gradient.
  if (Param* wte = params_->find("wte.weight"); wte && par_.embedding_comm && par_.embedding_comm->size() > 1)
    par_.embedding_comm->allreduce(wte->grad.data(), wte->numel(), ReduceOp::Sum);
  if (par_.dp > 1)
    for (auto& [name, p] : params_->all()) par_.dp_comm->allreduce(p->grad.data(), p->numel(), ReduceOp::Sum);
}

double Trainer::gradient_norm() {
  // Each element of the global model counted once: tp-replicated tensors on tp rank 0
  // only, the tied embedding only on the rank of stage 0.
  double local = 0;
  for (auto& [name, p] : params_->all()) {
    if (p->replicated_over_tp && par_.tp_rank != 0) continue;
    if (name == "wte.weight" && !holds_stage(0)) continue;
    local += ops_.sum_squares(p->grad.data(), p->numel());
  }
  par_.tp_comm->allreduce(&local, 1, ReduceOp::Sum);
  par_.pp_comm->allreduce(&local, 1, ReduceOp::Sum);
  return std::sqrt(local);
}

StepResult Trainer::train_step() {
  const auto& t = cfg_.training;
  timeline_.start_step();
  params_->zero_grads();
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
  if (t.grad_clip > 0 && r.grad_norm > t.grad_clip) {
    const float scale = float(t.grad_clip / (r.grad_norm + 1e-6));
    for (auto& [name, p] : params_->all()) ops_.scale(p->grad.data(), scale, p->numel());
  }
  r.lr = learning_rate(step_, t.steps, t.warmup_steps, t.lr, t.min_lr);
  optimizer_->step(r.lr, step_ + 1);
  if (faults_.find("repeat_update")) optimizer_->step(r.lr, step_ + 1);
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
  if (cfg_.precision() == Precision::bf16) params_->refresh_bf16();
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
