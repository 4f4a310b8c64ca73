#include "pipeline/simulate.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "pipeline/dependencies.h"
#include "pipeline/lower.h"

namespace pptrain::pipeline {

CostModel parse_cost(const std::string& spec) {
  CostModel cost;
  std::stringstream items(spec);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail("--cost '", spec, "': '", item, "' is not KEY=NUMBER (keys f, i, w, comm, act_i, act_w, act_from_i, e.g. "
           "f=1,i=1,w=1); a cost file of `pptrain profile` is for the planner (parallel.profile=FILE), not a schedule");
    std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    double x = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(x >= 0) || x > 1e12)
      fail("--cost '", spec, "': ", key, " needs a number >= 0 (got '", value, "')");
    if (key == "f") cost.forward = x;
    else if (key == "i") cost.input_grad = x;
    else if (key == "w") cost.weight_grad = x;
    else if (key == "comm") cost.comm = x;
    else if (key == "act_i") cost.act_input = x;
    else if (key == "act_w") cost.act_weight = x;
    else if (key == "act_from_i") cost.act_from_input = x;
    else fail("--cost '", spec, "': unknown key '", key, "' (f, i, w, comm, act_i, act_w, act_from_i)");
  }
  return cost;
}

std::string to_string(const CostModel& c) {
  return cat("f=", format_number(c.forward), ",i=", format_number(c.input_grad),
             ",w=", format_number(c.weight_grad), ",comm=", format_number(c.comm),
             ",act_i=", format_number(c.act_input), ",act_w=", format_number(c.act_weight),
             ",act_from_i=", format_number(c.act_from_input));
}

namespace {

double duration(const CostModel& c, const Schedule& s, const Action& a) {
  auto pick = [&](const std::vector<double>& per_stage, double share) {
    return per_stage.empty() ? share / s.stages_per_rank : per_stage[a.stage];
  };
  const double f = pick(c.stage_forward, c.forward), i = pick(c.stage_input_grad, c.input_grad),
               w = pick(c.stage_weight_grad, c.weight_grad);
  switch (a.op) {
    case Op::F: return f;
    case Op::I: return i;
    case Op::W: return w;
    case Op::B: return i + w;
    default: return 0;
  }
}

// The keys of actions index flat tables (KeyTable), so every action and the other end of
// every message must be in range.
void check_in_range(const Schedule& s) {
  for (size_t r = 0; r < s.program.size(); ++r)
    for (const Action& a : s.program[r]) {
      const Action other = matching_action(a);
      for (const Action& x : {a, other})
        if (x.stage < 0 || x.stage >= s.num_stages() || x.microbatch < 0 || x.microbatch >= s.microbatches)
          fail("simulate: schedule '", s.name, "': rank ", r, ", action ", to_string(a),
               " is outside its stages or microbatches (run validate for details)");
    }
}

// Plays the ranks' programs round after round, each as far as step(rank) lets it (step
// advances pos[rank] and returns true, or returns false while the action's input is not
// there yet), until no rank moves; then fails naming the first rank left waiting.
template <typename Step>
void replay(const Schedule& s, const std::vector<size_t>& pos, Step&& step) {
  const int pp = int(s.program.size());
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r)
      while (pos[r] < s.program[r].size() && step(r)) progress = true;
  }
  for (int r = 0; r < pp; ++r)
    if (pos[r] < s.program[r].size())
      fail("simulate: schedule '", s.name, "' cannot finish: rank ", r, " waits forever at position ",
           pos[r], ", action ", to_string(s.program[r][pos[r]]), " (run validate for details)");
}

}  // namespace

SimResult simulate(const Schedule& schedule, const CostModel& cost) {
  const Schedule s = has_communication(schedule.program) ? schedule : lower(schedule);
  const int pp = s.pp, stages = s.num_stages();
  for (const auto* list : {&cost.stage_forward, &cost.stage_input_grad, &cost.stage_weight_grad,
                           &cost.stage_act_input, &cost.stage_act_weight, &cost.stage_act_from_input,
                           &cost.stage_static_memory})
    if (!list->empty() && int(list->size()) != stages)
      fail("cost model: ", list->size(), " per-stage costs for ", stages, " stages");
  const bool stage_activations = !cost.stage_act_input.empty();
  if (cost.stage_act_weight.empty() == stage_activations)
    fail("cost model: per-stage activation memory needs both lists (freed by I, kept until W)");
  // One microbatch's activations of a stage: absolute when given per stage, else in units of
  // the rank's share (x v), divided by v when reported.
  auto act_input = [&](int stage) { return stage_activations ? cost.stage_act_input[stage] : cost.act_input; };
  auto act_weight = [&](int stage) { return stage_activations ? cost.stage_act_weight[stage] : cost.act_weight; };
  if (!cost.stage_act_from_input.empty() && !stage_activations)
    fail("cost model: per-stage bytes taken by I need the per-stage lists freed by I and kept until W");
  auto act_from_input = [&](int stage) {
    if (!stage_activations) return cost.act_from_input;
    return cost.stage_act_from_input.empty() ? 0.0 : cost.stage_act_from_input[stage];
  };
  PPTRAIN_CHECK(int(s.program.size()) == pp);

  SimResult out;
  out.busy.assign(pp, 0);
  out.peak_activations.assign(pp, 0);
  out.timeline.resize(pp);
  std::vector<double> clock(pp, 0), memory(pp, 0), first_start(pp, -1), last_end(pp, 0);
  std::vector<size_t> pos(pp, 0);
  // Message (keyed by its RECV) -> time; kNone until it happens.
  check_in_range(s);
  constexpr double kNone = -1;
  KeyTable<double> sent(stages, s.microbatches, kNone), posted(stages, s.microbatches, kNone);

  // Runs rank r's next action if its inputs have been sent; false if it must wait.
  auto step = [&](int r) -> bool {
    const Action& a = s.program[r][pos[r]];
    double start = clock[r];
    if (a.op == Op::SEND_F || a.op == Op::SEND_B) {
      sent[key_of(matching_action(a))] = start;
    } else if (a.op == Op::RECV_F || a.op == Op::RECV_B) {
      posted[key_of(a)] = start;
    } else if (auto msg = incoming_message(s, a)) {
      const double sent_at = sent[key_of(msg->recv)];
      if (sent_at == kNone) return false;
      const double posted_at = posted[key_of(msg->recv)];
      const double post_time = posted_at == kNone ? start : posted_at;
      start = std::max(start, std::max(sent_at, post_time) + cost.comm);
    }
    double end = start + duration(cost, s, a);
    out.timeline[r].push_back({a, start, end});
    if (is_compute(a.op)) {
      out.busy[r] += end - start;
      if (first_start[r] < 0) first_start[r] = start;
      last_end[r] = end;
      // Activations appear with F, and (recompute) with I while F's are still held; I frees
      // the part only dgrad needed, W the rest.
      if (a.op == Op::F) memory[r] += act_input(a.stage) + act_weight(a.stage);
      if (a.op == Op::I || a.op == Op::B) memory[r] += act_from_input(a.stage);
      out.peak_activations[r] = std::max(out.peak_activations[r], memory[r]);
      if (a.op == Op::I) memory[r] -= act_input(a.stage);
      if (a.op == Op::W) memory[r] -= act_weight(a.stage) + act_from_input(a.stage);
      if (a.op == Op::B) memory[r] -= act_input(a.stage) + act_weight(a.stage) + act_from_input(a.stage);
    }
    clock[r] = end;
    ++pos[r];
    return true;
  };

  replay(s, pos, step);

  if (!stage_activations)
    for (double& peak : out.peak_activations) peak /= s.stages_per_rank;
  out.peak_memory = out.peak_activations;
  if (!cost.stage_static_memory.empty())
    for (int stage = 0; stage < stages; ++stage) out.peak_memory[s.rank_of(stage)] += cost.stage_static_memory[stage];
  out.makespan = *std::max_element(clock.begin(), clock.end());
  double total_busy = 0, total_span = 0;
  for (int r = 0; r < pp; ++r) {
    total_busy += out.busy[r];
    double span = first_start[r] < 0 ? 0 : last_end[r] - first_start[r];
    total_span += span;
    out.idle.push_back(out.makespan - out.busy[r]);
    out.span_idle.push_back(span - out.busy[r]);
  }
  out.bubble_ratio = out.makespan > 0 ? 1 - total_busy / (pp * out.makespan) : 0;
  out.span_bubble_ratio = total_span > 0 ? 1 - total_busy / total_span : 0;
  return out;
}

// The same walk as simulate(), recording which ends each start waits for instead of times.
TimingGraph timing_graph(const Schedule& schedule) {
  const Schedule s = has_communication(schedule.program) ? schedule : lower(schedule);
  const int pp = s.pp;
  PPTRAIN_CHECK(int(s.program.size()) == pp);
  check_in_range(s);
  TimingGraph g;
  g.last_of_rank.assign(pp, -1);
  // Message (keyed by its RECV) -> the node whose end it was sent (or posted) at, -1 for the
  // start of the step; kNone until it happens.
  constexpr int kNone = -2;
  KeyTable<int> sent(s.num_stages(), s.microbatches, kNone), posted(s.num_stages(), s.microbatches, kNone);
  std::vector<size_t> pos(pp, 0);

  auto step = [&](int r) -> bool {
    const Action& a = s.program[r][pos[r]];
    const int previous = g.last_of_rank[r];
    if (a.op == Op::SEND_F || a.op == Op::SEND_B) {
      sent[key_of(matching_action(a))] = previous;
    } else if (a.op == Op::RECV_F || a.op == Op::RECV_B) {
      posted[key_of(a)] = previous;
    } else {
      TimingNode node{a, r, {}};
      if (previous >= 0) node.after.push_back({previous, false});
      if (auto msg = incoming_message(s, a)) {
        const int sender = sent[key_of(msg->recv)];
        if (sender == kNone) return false;
        const int poster = posted[key_of(msg->recv)] == kNone ? previous : posted[key_of(msg->recv)];
        node.after.push_back({sender, true});
        if (poster != sender) node.after.push_back({poster, true});
      }
      g.last_of_rank[r] = int(g.nodes.size());
      g.nodes.push_back(std::move(node));
    }
    ++pos[r];
    return true;
  };
  replay(s, pos, step);
  return g;
}

std::vector<double> earliest_starts(const TimingGraph& graph, const std::vector<double>& durations,
                                    double comm) {
  PPTRAIN_CHECK(durations.size() == graph.nodes.size());
  std::vector<double> start(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const TimingNode::After& a : graph.nodes[i].after) {
      const double end = a.node < 0 ? 0 : start[a.node] + durations[a.node];
      start[i] = std::max(start[i], a.message ? end + comm : end);
    }
  return start;
}

std::vector<MemoryPoint> memory_points(const Schedule& s) {
  check_in_range(s);
  std::vector<MemoryPoint> points;
  for (int r = 0; r < int(s.program.size()); ++r) {
    const std::vector<int> none(size_t(s.num_stages()), 0);
    MemoryPoint live{r, none, none, none};
    for (const Action& a : s.program[r]) {
      if (a.op == Op::F) {
        ++live.input_live[a.stage];
        ++live.weight_live[a.stage];
        points.push_back(live);
      }
      if (a.op == Op::I || a.op == Op::B) {
        ++live.from_input_live[a.stage];
        points.push_back(live);
        --live.input_live[a.stage];
      }
      if (a.op == Op::W || a.op == Op::B) {
        --live.weight_live[a.stage];
        --live.from_input_live[a.stage];
      }
    }
  }
  return points;
}

}  // namespace pptrain::pipeline
