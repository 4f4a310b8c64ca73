#include "partition/auto_layout.h"

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "model/dims.h"
#include "partition/partition.h"
#include "partition/partitioner.h"
#include "partition/profile.h"
#include "partition/recompute_choice.h"
#include "pipeline/auto_schedule.h"
#include "pipeline/registry.h"
#include "pipeline/transform.h"

namespace pptrain {
namespace {

// The profile the config names, or one measured now at the config's tp (all a job uses).
CostProfile load_or_measure(const Config& cfg, MpiComm& world, const ProfileOptions& measure, std::string* source) {
  if (!cfg.parallel.profile.empty() && cfg.parallel.profile != "measure") {
    *source = cfg.parallel.profile;
    CostProfile p = read_cost_profile(cfg.parallel.profile);
    check_profile_matches(p, cfg, cfg.parallel.profile);
    return p;
  }
  *source = "measured at start-up";
  std::unique_ptr<Ops> ops = cfg.device == "cuda" ? make_cuda_ops(cfg) : make_cpu_ops();
  ProfileOptions job = measure;
  job.job_tp_only = true;
  return profile_costs(cfg, *ops, world, job);
}

}  // namespace

StageRecompute stage_recompute(const Config& cfg) {
  StageRecompute out;
  for (int s = 0; s < cfg.total_stages(); ++s)
    out.push_back(ModelDims::recompute_name_of(cfg, s));
  return out;
}

void check_profile_matches(const CostProfile& p, const Config& cfg, const std::string& what) {
  const ModelConfig& m = cfg.model;
  auto differ = [&](const char* key, const auto& have, const auto& want) {
    fail(what, ": profile of ", key, " ", have, " does not apply to ", cfg.source, " (", key, " ", want,
         "); measure one with pptrain profile ", cfg.source);
  };
  if (p.device != cfg.device) differ("device", p.device, cfg.device);
  if (p.precision != cfg.training.precision) differ("precision", p.precision, cfg.training.precision);
  if (p.attention != m.attention) differ("attention", p.attention, m.attention);
  if (p.n_layer != m.n_layer) differ("n_layer", p.n_layer, m.n_layer);
  if (p.seq_len != m.seq_len) differ("seq_len", p.seq_len, m.seq_len);
  if (p.d_model != m.d_model) differ("d_model", p.d_model, m.d_model);
  if (p.n_head != m.n_head) differ("n_head", p.n_head, m.n_head);
  if (p.vocab_size != m.vocab_size) differ("vocab_size", p.vocab_size, m.vocab_size);
}

ResolvedLayout resolve_layout(const Config& cfg, MpiComm& world, const ProfileOptions& measure) {
  ResolvedLayout out{cfg, std::nullopt, std::nullopt, ""};
  const ParallelConfig& par = cfg.parallel;
  const bool auto_schedule = par.schedule == "auto";
  if (!auto_schedule && par.profile.empty()) return out;
  // With costs at hand an unset split is planned; a given one is only predicted.
  const bool auto_split = par.layers_per_stage.empty();
  // parallel.memory_per_rank_gib: the limit the split and training.recompute: auto must fit.
  const double limit = par.memory_per_rank_gib * double(1 << 30);
  const bool auto_recompute = cfg.training.recompute.is_auto();

  const CostProfile measured = load_or_measure(cfg, world, measure, &out.profile_source);
  const CostProfile prof = scaled_profile(measured, cfg.training.micro_batch_size, par.tp);
  const int n_layer = cfg.model.n_layer;
  const std::vector<int> given = par.layers_per_stage.empty() ? blocks_per_stage(cfg) : par.layers_per_stage;
  // The program and split for one recompute choice: planned (auto split, auto schedule) or
  // the given split checked against the limit; throws when it does not fit.
  const PlanForRecompute plan = [&](const StageRecompute& recompute) {
    RecomputePlan p{recompute, {}, {given, 0, {}}};
    if (auto_schedule && auto_split) {
      AutoPlan a = plan_auto_schedule(prof, par.pp, par.microbatches, par.stages_per_rank, n_layer, limit, recompute);
      p.program = std::move(a.program);
      p.partition.blocks_per_stage = std::move(a.blocks_per_stage);
      return p;
    }
    p.program = auto_schedule ? auto_program(prof, par.pp, par.microbatches, par.stages_per_rank, given, recompute)
                              : pipeline::runtime_form(pipeline::load_or_generate(par.schedule, par.pp,
                                                                                  par.microbatches, par.stages_per_rank));
    if (auto_split) p.partition = partition_stages(prof, p.program, n_layer, limit, recompute);
    else require_split_fits(prof, p.program, given, recompute, limit);
    return p;
  };
  RecomputePlan planned;
  try {
    if (auto_recompute) {
      // The order of stages by microbatches in flight is the program's before recompute
      // (recompute changes costs and bytes, not which stage holds the most microbatches).
      const pipeline::Schedule first =
          auto_schedule ? auto_start_program(par.pp, par.microbatches, par.stages_per_rank)
                        : pipeline::load_or_generate(par.schedule, par.pp, par.microbatches, par.stages_per_rank);
      planned = choose_recompute(plan, stages_by_microbatches_in_flight(first), prof.attention == "naive", limit);
    } else {
      planned = plan(stage_recompute(cfg));
    }
  } catch (const Error& e) {
    const char* key = auto_recompute ? "key 'training.recompute': auto: "
                      : limit > 0    ? "key 'parallel.memory_per_rank_gib': "
                      : auto_schedule ? "key 'parallel.schedule': "
                                      : "";
    fail(cfg.source, ": ", key, e.what());
  }
  const StageRecompute& recompute = planned.recompute;
  if (auto_recompute) {
    out.config.training.recompute = RecomputeConfig{};
    out.config.training.recompute.per_stage = recompute;
  }
  const std::vector<int> blocks = planned.partition.blocks_per_stage;
  const pipeline::Schedule& program = planned.program;
  out.config.parallel.layers_per_stage = blocks;
  if (auto_schedule) out.program = program;
  out.prediction = predict_layout(prof, program, blocks, par.dp, recompute);
  out.prediction->schedule = auto_schedule ? program.name : par.schedule;
  return out;
}

}  // namespace pptrain
