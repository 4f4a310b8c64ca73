#include "partition/layout_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "partition/partitioner.h"
#include "partition/recompute_choice.h"
#include "pipeline/auto_schedule.h"
#include "pipeline/registry.h"
#include "pipeline/transform.h"

namespace pptrain {
namespace {

// The profile's all-reduce model on `ranks` ranks. A ring all-reduce moves 2·(r-1)/r of
// the buffer through each rank; the model's bandwidth was fitted on allreduce_ranks ranks,
// so the bytes term is rescaled by the ratio of the two factors.
double allreduce_ms(const CostProfile& p, double bytes, int ranks) {
  if (ranks < 2 || bytes <= 0) return 0;
  auto ring = [](int r) { return 2.0 * (r - 1) / r; };
  const double fitted = ring(std::max(2, p.allreduce_ranks));
  return p.allreduce_latency_ms + bytes * ring(ranks) / fitted / p.allreduce_bytes_per_ms;
}

double largest(const std::vector<double>& per_rank) { return *std::max_element(per_rank.begin(), per_rank.end()); }

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// The schedules a layout may run: every generator, with its default stages per rank, and
// the automatic schedule for 1 and 2 stages per rank.
struct ScheduleShape {
  std::string name;
  int stages_per_rank;
};
std::vector<ScheduleShape> schedule_shapes(int pp) {
  if (pp == 1) return {{"1f1b", 1}};
  std::vector<ScheduleShape> out;
  for (const std::string& name : pipeline::schedule_names())
    out.push_back({name, pipeline::default_stages_per_rank(name)});
  out.push_back({"auto", 1});
  out.push_back({"auto", 2});
  return out;
}

// Parameter elements per pp rank of a split: the largest (it sets the gradient all-reduce
// and the update time, which every rank waits for) and the tied embedding's, with whether
// the first and last stage sit on different ranks (their copies are then summed).
struct RankParams {
  double most = 0, embedding = 0;
  bool embedding_split = false;
};
RankParams rank_parameters(const CostProfile& p, const pipeline::Schedule& program, const std::vector<int>& blocks) {
  const int stages = int(blocks.size()), pp = program.pp;
  std::vector<double> elements(pp, 0.0);
  for (int s = 0; s < stages; ++s) {
    double moments = blocks[s] * p.block.optim_bytes;  // 8 bytes of moments per element
    if (s == 0) moments += p.embedding.optim_bytes;
    if (s == stages - 1) moments += p.head.optim_bytes;
    elements[pipeline::rank_of_stage(program.placement, s, pp)] += moments / 8;
  }
  RankParams out;
  out.embedding = tied_embedding_optim_bytes(p) / 8;
  const int first = pipeline::rank_of_stage(program.placement, 0, pp),
            last = pipeline::rank_of_stage(program.placement, stages - 1, pp);
  out.embedding_split = first != last;
  if (!out.embedding_split) elements[first] -= out.embedding;  // one copy, counted twice above
  out.most = largest(elements);
  return out;
}

}  // namespace

CostProfile scaled_profile(const CostProfile& p, int mbs, int tp) {
  CostProfile s = p;
  const double batch = double(mbs) / p.micro_batch_size, shard = double(p.tp) / tp;
  const double nc_bytes = p.transfer_bytes * batch;  // one [N,C] activation of the layout
  // Layer costs measured at this tp (their all-reduces included) need only the batch
  // scaling; otherwise compute divides by tp and the tp all-reduces are modelled.
  const TpLayerCosts* measured = nullptr;
  for (const TpLayerCosts& t : p.other_tp)
    if (t.tp == tp) measured = &t;
  auto scale = [&](LayerCost c, int allreduces_f, int allreduces_i) {
    const double compute = measured ? batch : batch * shard;
    c.forward_ms = c.forward_ms * compute + allreduces_f * allreduce_ms(p, nc_bytes, tp);
    c.input_grad_ms = c.input_grad_ms * compute + allreduces_i * allreduce_ms(p, nc_bytes, tp);
    c.weight_grad_ms *= compute;
    c.act_fi_bytes *= compute;
    c.act_iw_bytes *= compute;
    c.act_from_input_bytes *= compute;
    if (!measured) {
      c.param_bytes *= shard;
      c.optim_bytes *= shard;
    }
    return c;
  };
  // Times measured at p.tp already hold that layout's all-reduces; the model only adds
  // what a larger tp adds, so it is stated for profiles taken at tp = 1.
  const bool add = tp > 1 && p.tp == 1 && !measured;
  s.embedding = scale(measured ? measured->embedding : p.embedding, add ? 1 : 0, 0);
  s.block = scale(measured ? measured->block : p.block, add ? 2 : 0, add ? 2 : 0);
  // Under recompute I re-runs the forward, its two all-reduces included (model/block.h).
  s.block_attention = scale(measured ? measured->block_attention : p.block_attention, add ? 2 : 0, add ? 2 : 0);
  s.block_full = scale(measured ? measured->block_full : p.block_full, add ? 2 : 0, add ? 4 : 0);
  s.head = scale(measured ? measured->head : p.head, 0, add ? 1 : 0);
  s.other_tp.clear();
  s.micro_batch_size = mbs;
  s.tp = tp;
  s.transfer_bytes = nc_bytes;
  s.transfer_ms = p.transfer_ms * batch;
  return s;
}

LayoutChoice predict_layout(const CostProfile& prof, const pipeline::Schedule& program,
                            const std::vector<int>& blocks_per_stage, int dp, const StageRecompute& recompute) {
  LayoutChoice c;
  c.pp = program.pp, c.tp = prof.tp, c.dp = dp, c.stages_per_rank = program.stages_per_rank;
  c.micro_batch_size = prof.micro_batch_size, c.microbatches = program.microbatches;
  c.layers_per_stage = blocks_per_stage;
  c.recompute = recompute.empty() ? StageRecompute(blocks_per_stage.size(), "none") : recompute;
  const pipeline::SimResult sim = pipeline::simulate(program, stage_cost_model(prof, blocks_per_stage, recompute));
  c.pipeline_ms = sim.makespan;
  c.bubble = sim.bubble_ratio;
  c.peak_bytes = largest(sim.peak_memory);
  const RankParams held = rank_parameters(prof, program, blocks_per_stage);
  c.sync_ms = allreduce_ms(prof, 4.0 * held.most, dp) +
              (held.embedding_split ? allreduce_ms(prof, 4.0 * held.embedding, 2) : 0.0);
  c.optimizer_ms = held.most * prof.update_ns_per_param * 1e-6;
  c.step_ms = c.pipeline_ms + c.sync_ms + c.optimizer_ms;
  return c;
}

pipeline::Schedule auto_program(const CostProfile& prof, int pp, int microbatches, int stages_per_rank,
                                const std::vector<int>& blocks_per_stage, const StageRecompute& recompute) {
  return pipeline::auto_schedule(pp, microbatches, stages_per_rank, stage_cost_model(prof, blocks_per_stage, recompute),
                                 0);
}

pipeline::Schedule auto_start_program(int pp, int microbatches, int stages_per_rank) {
  return pipeline::generate_schedule(stages_per_rank == 2 ? "zbv" : "zb-h1", pp, microbatches, stages_per_rank);
}

AutoPlan plan_auto_schedule(const CostProfile& prof, int pp, int microbatches, int stages_per_rank, int n_layer,
                            double memory_limit_bytes, const StageRecompute& recompute) {
  const pipeline::Schedule start = auto_start_program(pp, microbatches, stages_per_rank);
  const std::vector<int> first =
      partition_stages(prof, start, n_layer, memory_limit_bytes, recompute).blocks_per_stage;
  const pipeline::Schedule built = auto_program(prof, pp, microbatches, stages_per_rank, first, recompute);
  AutoPlan plan;
  plan.blocks_per_stage = partition_stages(prof, built, n_layer, memory_limit_bytes, recompute).blocks_per_stage;
  plan.program = auto_program(prof, pp, microbatches, stages_per_rank, plan.blocks_per_stage, recompute);
  // The program rebuilt for the final split may hold more activations than the split was
  // planned for: refused like any split over the limit.
  require_split_fits(prof, plan.program, plan.blocks_per_stage, recompute, memory_limit_bytes);
  return plan;
}

RecomputePlan plan_auto_recompute(const CostProfile& prof, int pp, int microbatches, int stages_per_rank,
                                  int n_layer, double memory_limit_bytes) {
  const PlanForRecompute plan = [&](const StageRecompute& recompute) {
    AutoPlan a = plan_auto_schedule(prof, pp, microbatches, stages_per_rank, n_layer, memory_limit_bytes, recompute);
    Partition part{a.blocks_per_stage, 0, {}};
    return RecomputePlan{recompute, std::move(a.program), part};
  };
  return choose_recompute(plan, stages_by_microbatches_in_flight(auto_start_program(pp, microbatches, stages_per_rank)),
                          prof.attention == "naive", memory_limit_bytes);
}

std::vector<LayoutChoice> search_layouts(const Config& cfg, const CostProfile& prof,
                                         const LayoutSearchOptions& opts) {
  const ModelConfig& m = cfg.model;
  const long long global = cfg.global_batch_sequences();
  std::vector<LayoutChoice> found;
  double smallest_peak = std::numeric_limits<double>::infinity();
  for (int tp : divisors(opts.ranks)) {
    if (m.n_head % tp != 0) continue;
    for (int pp : divisors(opts.ranks / tp)) {
      const int dp = opts.ranks / tp / pp;
      if (global % dp != 0) continue;
      const long long per_replica = global / dp;
      for (int mbs : divisors(int(std::min<long long>(per_replica, 1 << 20)))) {
        if (mbs > opts.max_micro_batch_factor * prof.micro_batch_size) break;
        const int micro = int(per_replica / mbs);
        const CostProfile scaled = scaled_profile(prof, mbs, tp);
        for (const ScheduleShape& shape : schedule_shapes(pp)) {
          const int stages = pp * shape.stages_per_rank;
          if (stages > m.n_layer + 2) continue;
          RecomputePlan planned;
          try {
            if (shape.name == "auto") {
              planned = plan_auto_recompute(scaled, pp, micro, shape.stages_per_rank, m.n_layer,
                                            opts.memory_per_rank_bytes);
            } else {
              planned.program =
                  pipeline::runtime_form(pipeline::generate_schedule(shape.name, pp, micro, shape.stages_per_rank));
            }
          } catch (const Error&) {
            continue;  // a shape the schedule does not take (e.g. DualPipeV with m < 2p-1), or auto over the limit
          }
          if (shape.name != "auto") {
            try {
              planned = choose_recompute(scaled, planned.program, m.n_layer, opts.memory_per_rank_bytes);
            } catch (const Error&) {
              // Not even with every stage under full recompute: the least it needs.
              const StageRecompute full(size_t(stages), "full");
              const Partition least = min_memory_partition(scaled, planned.program, m.n_layer, full);
              smallest_peak = std::min(smallest_peak, largest(least.peak_bytes));
              continue;
            }
          }
          const pipeline::Schedule& program = planned.program;
          LayoutChoice c = predict_layout(scaled, program, planned.partition.blocks_per_stage, dp, planned.recompute);
          // The program rebuilt for the final split may hold more activations.
          if (opts.memory_per_rank_bytes > 0 && c.peak_bytes > opts.memory_per_rank_bytes) continue;
          c.schedule = shape.name;
          c.micro_batch_size = mbs;
          found.push_back(c);
        }
      }
    }
  }
  if (found.empty())
    fail("no layout of ", opts.ranks, " ranks fits ", opts.memory_per_rank_bytes / double(1 << 30),
         " GiB per rank; the smallest that would is ", smallest_peak / double(1 << 30), " GiB");
  std::stable_sort(found.begin(), found.end(),
                   [](const LayoutChoice& a, const LayoutChoice& b) {
                     // Equal predictions (times scale linearly with the micro-batch size):
                     // the layout that needs less memory first.
                     if (a.step_ms != b.step_ms) return a.step_ms < b.step_ms;
                     return a.peak_bytes < b.peak_bytes;
                   });
  return found;
}

Config config_for_layout(const Config& cfg, const LayoutChoice& c) {
  Config out = cfg;
  out.parallel.pp = c.pp;
  out.parallel.tp = c.tp;
  out.parallel.dp = c.dp;
  out.parallel.schedule = c.schedule;
  out.parallel.stages_per_rank = c.stages_per_rank;
  out.parallel.microbatches = c.microbatches;
  out.parallel.layers_per_stage = c.layers_per_stage;
  out.training.micro_batch_size = c.micro_batch_size;
  out.training.recompute = RecomputeConfig{};  // none everywhere
  if (any_recompute(c.recompute)) {
    out.training.recompute.every.clear();
    out.training.recompute.per_stage = c.recompute;
  }
  return out;
}

}  // namespace pptrain
