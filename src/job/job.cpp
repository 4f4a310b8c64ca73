#include "job/job.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/log.h"
#include "job/memory_estimate.h"
#include "model/dims.h"
#include "parallel/device_comm.h"
#include "partition/partition.h"
#include "pipeline/registry.h"

namespace pptrain {

MpiComm checked_world(const Config& cfg) {
  MpiComm world = MpiComm::world();
  if (cfg.world_size() != world.size())
    fail(cfg.source, ": parallel.dp x pp x tp = ", cfg.parallel.dp, " x ", cfg.parallel.pp, " x ",
         cfg.parallel.tp, " = ", cfg.world_size(), " ranks, but the job has ", world.size(), " (rank ",
         world.rank(), ")");
  return world;
}

namespace {

// The pp ranks holding the tied token embedding: those of the first and last stage; none
// when the head has a matrix of its own (model.tie_embeddings: false).
std::vector<int> embedding_pp_ranks(const Config& cfg, const pipeline::Schedule& s) {
  if (!cfg.model.tie_embeddings) return {};
  return {pipeline::rank_of_stage(s.placement, 0, cfg.parallel.pp),
          pipeline::rank_of_stage(s.placement, cfg.total_stages() - 1, cfg.parallel.pp)};
}

std::unique_ptr<Ops> make_ops(const Config& cfg, const Faults& faults) {
  if (cfg.device == "cuda") return make_cuda_ops(cfg);
  return make_cpu_ops(faults);
}

}  // namespace

std::string Job::transport() const {
  if (transports_.empty()) return "mpi";
  bool all_nccl = true, all_mpi = true;
  for (const auto& [name, t] : transports_) {
    all_nccl = all_nccl && t.nccl;
    all_mpi = all_mpi && !t.nccl;
  }
  if (all_nccl) return "nccl";
  std::string s;
  for (const auto& [name, t] : transports_)
    s += cat(s.empty() ? "" : ", ", name, " ", t.nccl ? "nccl" : "mpi", " (", t.why, ")");
  return all_mpi ? cat("mpi through pinned host buffers (", transports_.front().second.why, ")")
                 : cat(s, "; mpi through pinned host buffers");
}

Job::Job(JobPlan plan, MpiComm world, const Faults& faults, std::unique_ptr<Ops> ops)
    : cfg_(std::move(plan.config)),
      faults_(faults),
      world_(std::move(world)),
      schedule_(std::move(plan.schedule)),
      predicted_step_ms_(plan.predicted_step_ms()),
      grid_(world_, cfg_.parallel.dp, cfg_.parallel.pp, cfg_.parallel.tp, embedding_pp_ranks(cfg_, schedule_)),
      ops_(ops ? std::move(ops) : make_ops(cfg_, faults_)),
      par_(grid_.context(world_)) {
  const Config& cfg = cfg_;
  if (cfg.device == "cuda") {
    // On GPUs the pp, tp, dp and embedding groups talk over NCCL (in pptrain-emu over the
    // emulated NCCL, which runs on MPI), or over MPI through pinned host buffers where
    // parallel.comm says so or NCCL cannot serve the group (two of its ranks on one GPU).
    // Every rank creates its groups in the same order, so the collective inits cannot
    // cross; a group of one communicates nothing.
    auto connect = [&](const char* name, MpiComm& group, Communicator*& slot) {
      if (group.size() < 2) return;
      GroupTransport t;
      comms_.push_back(make_device_comm(cfg.parallel.comm, group, *ops_, &t));
      slot = comms_.back().get();
      transports_.push_back({name, t});
    };
    connect("pp", grid_.pp_comm(), par_.pp_comm);
    connect("tp", grid_.tp_comm(), par_.tp_comm);
    connect("dp", grid_.dp_comm(), par_.dp_comm);
    connect("embedding", grid_.embedding_comm(), par_.embedding_comm);
  }
  // Wrapped after the NCCL communicators took the cuda backend's stream from the backend
  // itself; everything built from here on calls the ops through the profiler.
  if (cfg.logging.op_profile > 0) {
    auto profiled = std::make_unique<ProfiledOps>(std::move(ops_));
    if (cfg.logging.kernel_profile) profiled->record_kernels();
    op_profiler_ = profiled.get();
    ops_ = std::move(profiled);
  }

  const bool fused_attention = ModelDims::from(cfg.model, 1, par_.tp, par_.tp_rank).fused_attention;
  if (cfg.training.recompute.uses("attention") && fused_attention)
    log::info("training.recompute: attention does nothing with model.attention: ", cfg.model.attention,
              " (fused attention keeps no probabilities; it recomputes them in I already)");
  params_ = std::make_unique<ParamStore>(*ops_, par_.tp, par_.tp_rank, cfg.training.seed);
  // The head scales the loss by 1/(tokens of the global batch), so gradients are plain
  // sums over microbatches and DP replicas (DESIGN.md, the layer contract).
  const double global_tokens = double(cfg.global_batch_sequences()) * cfg.model.seq_len;
  // The arenas' buckets (model/param.h): the parameters each stage creates, then the shared
  // tied embedding (job/memory_estimate.h, tied_embedding_shared).
  std::vector<ParamStore::Bucket> buckets;
  for (const StageSpec& spec : stage_specs(cfg)) {
    if (!holds_stage(spec.index)) continue;
    // Each stage its own training.recompute (a list gives one per stage).
    const ModelDims dims = ModelDims::from(cfg, par_.tp, par_.tp_rank, spec.index);
    std::set<std::string> existing;
    for (auto& [name, p] : params_->all()) existing.insert(name);
    stages_.push_back(make_stage(*params_, dims, spec, *par_.tp_comm, cfg.precision(), faults_));
    if (spec.has_head) stages_.back()->set_loss_scale(float(1.0 / global_tokens));
    buckets.push_back({spec.index, {}});
    for (auto& [name, p] : params_->all())
      if (!existing.count(name) && !(name == "wte.weight" && tied_embedding_shared(cfg)))
        buckets.back().names.push_back(name);
  }
  if (params_->find("wte.weight") && tied_embedding_shared(cfg))
    buckets.push_back({-1, {"wte.weight"}});
  for (auto& [name, p] : params_->all())
    p->primary = !(p->replicated_over_tp && par_.tp_rank != 0) && !(name == "wte.weight" && !holds_stage(0));
  // Arenas for the masters, the gradients and (bf16) the bf16 copies, in buckets each laid
  // out in dp equal parts: one all-reduce of the arena (zero: 0), or under zero: 1 a
  // reduce-scatter and an all-gather per bucket, overlapped with the pipeline (Trainer).
  // ZeRO-1 under bf16 keeps the masters of this dp rank's parts only.
  params_->flatten(cfg.parallel.dp, cfg.precision() == Precision::bf16,
                   cfg.zero_shards_masters() ? par_.dp_rank : -1, buckets);
}

Job::~Job() = default;

bool Job::holds_stage(int stage) const {
  return pipeline::rank_of_stage(schedule_.placement, stage, cfg_.parallel.pp) == par_.pp_rank;
}

}  // namespace pptrain
