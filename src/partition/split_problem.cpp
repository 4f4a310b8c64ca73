#include "partition/split_problem.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "core/error.h"
#include "pipeline/lower.h"

namespace pptrain::splits {

using pipeline::Op;

namespace {

// The block's costs on stage `stage` under its recompute mode (none when not given).
const LayerCost& stage_block(const CostProfile& prof, const StageRecompute& recompute, int stage) {
  return recompute.empty() ? prof.block : block_cost(prof, recompute[size_t(stage)]);
}

// The memory rows of one program: per rank, one per memory point plus one for the static
// bytes alone (a rank without F); equal rows and rows another row of the same rank
// bounds for every split (no larger anywhere) are dropped.
std::vector<MemoryRow> memory_rows(const Schedule& s, const pipeline::CostModel& zero,
                                   const std::vector<LayerCost>& block) {
  const int stages = s.num_stages();
  std::vector<std::set<MemoryRow>> per_rank(s.pp);
  auto add = [&](const pipeline::MemoryPoint& p) {
    MemoryRow row{std::vector<double>(stages, 0), 0};
    for (int st = 0; st < stages; ++st) {
      const LayerCost& b = block[size_t(st)];
      row.per_block[st] = p.input_live[st] * b.act_fi_bytes + p.weight_live[st] * b.act_iw_bytes +
                          p.from_input_live[st] * b.act_from_input_bytes;
      row.base += p.input_live[st] * zero.stage_act_input[st] + p.weight_live[st] * zero.stage_act_weight[st] +
                  p.from_input_live[st] * zero.stage_act_from_input[st];
      if (s.rank_of(st) == p.rank) {
        row.per_block[st] += b.param_bytes + b.optim_bytes;
        row.base += zero.stage_static_memory[st];
      }
    }
    per_rank[p.rank].insert(std::move(row));
  };
  const std::vector<int> none(size_t(stages), 0);
  for (int r = 0; r < s.pp; ++r) add({r, none, none, none});
  for (const pipeline::MemoryPoint& p : pipeline::memory_points(s)) add(p);

  auto bounds = [](const MemoryRow& big, const MemoryRow& small) {
    if (big.base < small.base) return false;
    for (size_t i = 0; i < big.per_block.size(); ++i)
      if (big.per_block[i] < small.per_block[i]) return false;
    return true;
  };
  std::vector<MemoryRow> out;
  for (const auto& rows : per_rank)
    for (const MemoryRow& row : rows)
      if (std::none_of(rows.begin(), rows.end(), [&](const MemoryRow& o) { return o != row && bounds(o, row); }))
        out.push_back(row);
  return out;
}

}  // namespace

// The sum of a stage's layers: the embedding (stage 0), n blocks, the head (last stage).
LayerCost stage_layers(const CostProfile& prof, const StageRecompute& recompute, int stage, int stages, int n) {
  LayerCost sum;
  auto add = [&](const LayerCost& l, double times) {
    sum.forward_ms += times * l.forward_ms;
    sum.input_grad_ms += times * l.input_grad_ms;
    sum.weight_grad_ms += times * l.weight_grad_ms;
    sum.act_fi_bytes += times * l.act_fi_bytes;
    sum.act_iw_bytes += times * l.act_iw_bytes;
    sum.act_from_input_bytes += times * l.act_from_input_bytes;
    sum.param_bytes += times * l.param_bytes;
    sum.optim_bytes += times * l.optim_bytes;
  };
  if (stage == 0) add(prof.embedding, 1);
  add(stage_block(prof, recompute, stage), n);
  if (stage == stages - 1) add(prof.head, 1);
  return sum;
}

Problem::Problem(const CostProfile& p, const Schedule& program, int layers, const StageRecompute& modes)
    : prof(p), recompute(modes), lowered(pipeline::has_communication(program.program) ? program : pipeline::lower(program)),
      stages(program.num_stages()), n_layer(layers) {
  const int inner = std::max(stages - 2, 0);  // stages that must hold a block
  if (n_layer < 1 || n_layer < inner)
    fail("partition: ", n_layer, " blocks cannot fill the ", stages, " stages of schedule '", program.name,
         "' (every stage but the first and the last needs one)");
  for (int s = 0; s < stages; ++s) min_blocks.push_back(s == 0 || s == stages - 1 ? 0 : 1);
  const int fixed = stages == 1 ? 0 : inner;
  for (int s = 0; s < stages; ++s) max_blocks.push_back(stages == 1 ? n_layer : n_layer - fixed + min_blocks[s]);
  if (stages == 1) min_blocks[0] = n_layer;

  if (!recompute.empty() && int(recompute.size()) != stages)
    fail("partition: ", recompute.size(), " recompute modes for the ", stages, " stages of schedule '", program.name,
         "'");
  for (int s = 0; s < stages; ++s) block.push_back(stage_block(prof, recompute, s));
  graph = pipeline::timing_graph(lowered);
  const pipeline::CostModel zero = stage_cost_model(prof, std::vector<int>(stages, 0), recompute);
  for (const pipeline::TimingNode& node : graph.nodes) {
    const int s = node.action.stage;
    const LayerCost& b = block[size_t(s)];
    switch (node.action.op) {
      case Op::F: durations.push_back({zero.stage_forward[s], b.forward_ms}); break;
      case Op::I: durations.push_back({zero.stage_input_grad[s], b.input_grad_ms}); break;
      case Op::W: durations.push_back({zero.stage_weight_grad[s], b.weight_grad_ms}); break;
      default:  // B
        durations.push_back({zero.stage_input_grad[s] + zero.stage_weight_grad[s], b.input_grad_ms + b.weight_grad_ms});
    }
  }
  memory = memory_rows(lowered, zero, block);
}

double bytes_at(const MemoryRow& row, const std::vector<int>& n) {
  double sum = row.base;
  for (size_t s = 0; s < n.size(); ++s) sum += row.per_block[s] * n[s];
  return sum;
}

Partition evaluate(const Problem& p, const std::vector<int>& n) {
  const SplitEvaluation e = evaluate_split(p.prof, p.lowered, n, p.recompute);
  return {n, e.step_ms, e.peak_bytes};
}

// The seed: the split whose most expensive stage (F + I + W) is the cheapest, found by
// dynamic programming over (stages so far, blocks so far).
std::vector<int> balanced_split(const Problem& p) {
  const int S = p.stages, L = p.n_layer;
  auto stage_ms = [&](int s, int n) {
    const LayerCost c = stage_layers(p.prof, p.recompute, s, S, n);
    return c.forward_ms + c.input_grad_ms + c.weight_grad_ms;
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> worst(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> take(S + 1, std::vector<int>(L + 1, -1));
  worst[0][0] = 0;
  for (int s = 0; s < S; ++s)
    for (int l = 0; l <= L; ++l) {
      if (worst[s][l] == inf) continue;
      for (int k = p.min_blocks[s]; k <= std::min(p.max_blocks[s], L - l); ++k) {
        const double w = std::max(worst[s][l], stage_ms(s, k));
        if (w < worst[s + 1][l + k]) {
          worst[s + 1][l + k] = w;
          take[s + 1][l + k] = k;
        }
      }
    }
  PPTRAIN_CHECK(take[S][L] >= 0);
  std::vector<int> n(S);
  for (int s = S, l = L; s > 0; --s) {
    n[s - 1] = take[s][l];
    l -= n[s - 1];
  }
  return n;
}

// The longest paths at split n (fractional blocks allowed: the relaxation's splits).
CriticalPaths critical_paths(const Problem& p, const std::vector<double>& n) {
  const auto& nodes = p.graph.nodes;
  std::vector<double> end(nodes.size());
  std::vector<const pipeline::TimingNode::After*> waited(nodes.size(), nullptr);  // null: from time 0
  for (size_t i = 0; i < nodes.size(); ++i) {
    double start = 0;
    for (const pipeline::TimingNode::After& a : nodes[i].after) {
      const double t = (a.node < 0 ? 0 : end[a.node]) + (a.message ? p.prof.transfer_ms : 0);
      if (t > start) {
        start = t;
        waited[i] = &a;
      }
    }
    end[i] = start + p.durations[i].base + p.durations[i].per_block * n[nodes[i].action.stage];
  }
  CriticalPaths out;
  for (int last : p.graph.last_of_rank) {
    if (last < 0) continue;
    out.makespan = std::max(out.makespan, end[last]);
    PathCut path{std::vector<double>(p.stages, 0), 0};
    for (int i = last; i >= 0;) {
      path.base += p.durations[i].base;
      path.per_block[nodes[i].action.stage] += p.durations[i].per_block;
      const pipeline::TimingNode::After* a = waited[i];
      if (a == nullptr) break;
      if (a->message) path.base += p.prof.transfer_ms;
      i = a->node;
    }
    out.paths.push_back(std::move(path));
  }
  return out;
}

}  // namespace pptrain::splits
