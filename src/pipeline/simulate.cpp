#include "pipeline/simulate.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <sstream>

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
    else fail("--cost '", spec, "': unknown key '", key, "' (f, i, w, comm, act_i, act_w)");
  }
  return cost;
}

std::string to_string(const CostModel& c) {
  return cat("f=", format_number(c.forward), ",i=", format_number(c.input_grad),
             ",w=", format_number(c.weight_grad), ",comm=", format_number(c.comm),
             ",act_i=", format_number(c.act_input), ",act_w=", format_number(c.act_weight));
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

}  // namespace

SimResult simulate(const Schedule& schedule, const CostModel& cost) {
  const Schedule s = has_communication(schedule.program) ? schedule : lower(schedule);
  const int pp = s.pp, stages = s.num_stages();
  for (const auto* list : {&cost.stage_forward, &cost.stage_input_grad, &cost.stage_weight_grad})
    if (!list->empty() && int(list->size()) != stages)
      fail("cost model: ", list->size(), " per-stage costs for ", stages, " stages");
  PPTRAIN_CHECK(int(s.program.size()) == pp);

  SimResult out;
  out.busy.assign(pp, 0);
  out.peak_activations.assign(pp, 0);
  out.timeline.resize(pp);
  std::vector<double> clock(pp, 0), memory(pp, 0), first_start(pp, -1), last_end(pp, 0);
  std::vector<size_t> pos(pp, 0);
  // Message (keyed by its RECV) -> time; kNone until it happens. The keys index flat
  // tables, so every action and the other end of every message must be in range.
  for (int r = 0; r < pp; ++r)
    for (const Action& a : s.program[r]) {
      const Action other = matching_action(a);
      for (const Action& x : {a, other})
        if (x.stage < 0 || x.stage >= stages || x.microbatch < 0 || x.microbatch >= s.microbatches)
          fail("simulate: schedule '", s.name, "': rank ", r, ", action ", to_string(a),
               " is outside its stages or microbatches (run validate for details)");
    }
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
      // Activations appear with F; I frees the part only dgrad needed, W the rest. Kept in
      // units of a stage (x v), divided by v when reported.
      if (a.op == Op::F) memory[r] += cost.act_input + cost.act_weight;
      out.peak_activations[r] = std::max(out.peak_activations[r], memory[r]);
      if (a.op == Op::I) memory[r] -= cost.act_input;
      if (a.op == Op::W) memory[r] -= cost.act_weight;
      if (a.op == Op::B) memory[r] -= cost.act_input + cost.act_weight;
    }
    clock[r] = end;
    ++pos[r];
    return true;
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r)
      while (pos[r] < s.program[r].size() && step(r)) progress = true;
  }
  for (int r = 0; r < pp; ++r)
    if (pos[r] < s.program[r].size())
      fail("simulate: schedule '", s.name, "' cannot finish: rank ", r, " waits forever at position ",
           pos[r], ", action ", to_string(s.program[r][pos[r]]), " (run validate for details)");

  for (double& peak : out.peak_activations) peak /= s.stages_per_rank;
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

}  // namespace pptrain::pipeline
