#include "partition/auto_layout.h"

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "model/dims.h"
#include "partition/partition.h"
#include "partition/partitioner.h"
#include "partition/profile.h"
#include "pipeline/auto_schedule.h"
#include "pipeline/registry.h"

namespace pptrain {
namespace {

// The profile the config names, or one measured now (tp = 1: scaled to the config's tp).
CostProfile load_or_measure(const Config& cfg, MpiComm& world, std::string* source) {
  if (!cfg.parallel.profile.empty() && cfg.parallel.profile != "measure") {
    *source = cfg.parallel.profile;
    CostProfile p = read_cost_profile(cfg.parallel.profile);
    check_profile_matches(p, cfg, cfg.parallel.profile);
    return p;
  }
  *source = "measured at start-up";
  Config one = cfg;
  one.parallel.tp = 1;
  std::unique_ptr<Ops> ops = cfg.device == "cuda" ? make_cuda_ops(cfg) : make_cpu_ops();
  return profile_costs(one, *ops, world);
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

ResolvedLayout resolve_layout(const Config& cfg, MpiComm& world) {
  ResolvedLayout out{cfg, std::nullopt, std::nullopt, ""};
  const ParallelConfig& par = cfg.parallel;
  // training.recompute: auto chooses against a memory limit; start-up has none (the
  // planner's limit is `pptrain plan --memory-per-rank`), so nothing needs recompute.
  if (cfg.training.recompute.is_auto()) out.config.training.recompute = RecomputeConfig{};
  const StageRecompute recompute = stage_recompute(out.config);
  const bool auto_schedule = par.schedule == "auto";
  if (!auto_schedule && par.profile.empty()) return out;
  // With costs at hand an unset split is planned; a given one is only predicted.
  const bool auto_split = par.layers_per_stage.empty();

  const CostProfile measured = load_or_measure(cfg, world, &out.profile_source);
  const CostProfile prof = scaled_profile(measured, cfg.training.micro_batch_size, par.tp);
  const int n_layer = cfg.model.n_layer;
  std::vector<int> blocks = par.layers_per_stage.empty() ? blocks_per_stage(cfg) : par.layers_per_stage;
  pipeline::Schedule program;
  if (auto_schedule) {
    try {
      if (auto_split) {
        AutoPlan plan =
            plan_auto_schedule(prof, par.pp, par.microbatches, par.stages_per_rank, n_layer, 0, recompute);
        program = std::move(plan.program);
        blocks = std::move(plan.blocks_per_stage);
      } else {
        program = auto_program(prof, par.pp, par.microbatches, par.stages_per_rank, blocks, recompute);
      }
    } catch (const Error& e) {
      fail(cfg.source, ": key 'parallel.schedule': ", e.what());
    }
  } else {
    program = pipeline::load_or_generate(par.schedule, par.pp, par.microbatches, par.stages_per_rank);
    if (auto_split) blocks = partition_stages(prof, program, n_layer, 0, recompute).blocks_per_stage;
  }
  out.config.parallel.layers_per_stage = blocks;
  if (auto_schedule) out.program = program;
  out.prediction = predict_layout(prof, program, blocks, par.dp, recompute);
  out.prediction->schedule = auto_schedule ? program.name : par.schedule;
  return out;
}

}  // namespace pptrain
