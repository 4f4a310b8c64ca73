// Text and JSON renderings of a schedule report.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "pipeline/render.h"

namespace pptrain::pipeline {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

namespace {

std::string json_number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.10g", x);
  return buffer;
}

std::string json_list(const std::vector<double>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + json_number(xs[i]);
  return out + "]";
}

std::string pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string right(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

}  // namespace

std::string render_text(const ScheduleReport& report) {
  PPTRAIN_CHECK(report.valid);
  const Schedule& s = report.schedule;
  const SimResult& sim = report.sim;

  // One column per quantum: the shortest compute action, or coarser for long programs.
  double quantum = 0;
  size_t label_width = 1;
  for (const auto& rank : sim.timeline)
    for (const TimedAction& t : rank)
      if (is_compute(t.action.op)) {
        double d = t.end - t.start;
        if (d > 0 && (quantum == 0 || d < quantum)) quantum = d;
        label_width = std::max(label_width, to_string(t.action).size());
      }
  if (quantum == 0) quantum = 1;
  constexpr double kMaxColumns = 2000;
  quantum = std::max(quantum, sim.makespan / kMaxColumns);
  const size_t columns = size_t(std::llround(sim.makespan / quantum));
  const size_t cell = label_width + 1;

  std::string out = cat(s.name, "  pp=", s.pp, "  microbatches=", s.microbatches,
                        "  stages_per_rank=", s.stages_per_rank,
                        "  placement=", placement_name(s.placement), "\n");
  out += cat("one column = ", format_number(quantum),
             " time units; <stage><op><microbatch> where an action starts, - while it runs, . idle"
             "\n\n");
  std::string header = pad("time", 8);
  for (size_t c = 0; c < columns; c += 5) header += pad(format_number(c * quantum), 5 * cell);
  while (!header.empty() && header.back() == ' ') header.pop_back();
  out += header + "\n";
  for (int r = 0; r < s.pp; ++r) {
    std::vector<std::string> row(columns, pad(".", label_width));
    for (const TimedAction& t : sim.timeline[r]) {
      if (!is_compute(t.action.op)) continue;
      size_t first = size_t(std::llround(t.start / quantum));
      size_t last = std::max(first + 1, size_t(std::llround(t.end / quantum)));
      for (size_t c = first; c < last && c < columns; ++c)
        row[c] = c == first ? pad(to_string(t.action), label_width) : std::string(label_width, '-');
    }
    std::string line = pad(cat("rank ", r), 8);
    for (const std::string& c : row) line += c + " ";
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }

  out += cat("\ncost ", to_string(report.cost), " (per rank's share of the model; a stage costs 1/",
             s.stages_per_rank, ")\n");
  out += cat("makespan ", format_number(sim.makespan), "   bubble ratio ",
             format_number(sim.bubble_ratio), "   inside each rank's span ",
             format_number(sim.span_bubble_ratio), "\n\n");
  out += "rank      busy      idle  span-idle  peak-activations  peak-in-flight\n";
  for (int r = 0; r < s.pp; ++r)
    out += cat(right(cat(r), 4), right(format_number(sim.busy[r]), 10),
               right(format_number(sim.idle[r]), 10), right(format_number(sim.span_idle[r]), 11),
               right(format_number(sim.peak_activations[r]), 18),
               right(format_number(report.peak_in_flight[r]), 16), "\n");
  return out;
}

std::string render_json(const ScheduleReport& report) {
  const Schedule& s = report.schedule;
  const CostModel& c = report.cost;
  std::string out = "{\n";
  out += cat("  \"schedule\": ", json_string(s.name), ",\n");
  out += cat("  \"pp\": ", s.pp, ",\n  \"microbatches\": ", s.microbatches,
             ",\n  \"stages_per_rank\": ", s.stages_per_rank, ",\n");
  out += cat("  \"placement\": ", json_string(placement_name(s.placement)), ",\n");
  out += cat("  \"valid\": ", report.valid ? "true" : "false", ",\n");
  out += cat("  \"error\": ", report.valid ? "null" : json_string(report.error), ",\n");
  out += cat("  \"cost\": {\"f\": ", json_number(c.forward), ", \"i\": ", json_number(c.input_grad),
             ", \"w\": ", json_number(c.weight_grad), ", \"comm\": ", json_number(c.comm),
             ", \"act_i\": ", json_number(c.act_input), ", \"act_w\": ",
             json_number(c.act_weight), "},\n");
  if (report.valid) {
    const SimResult& sim = report.sim;
    out += cat("  \"makespan\": ", json_number(sim.makespan), ",\n");
    out += cat("  \"bubble_ratio\": ", json_number(sim.bubble_ratio), ",\n");
    out += cat("  \"span_bubble_ratio\": ", json_number(sim.span_bubble_ratio), ",\n");
    out += cat("  \"busy\": ", json_list(sim.busy), ",\n");
    out += cat("  \"idle\": ", json_list(sim.idle), ",\n");
    out += cat("  \"span_idle\": ", json_list(sim.span_idle), ",\n");
    out += cat("  \"peak_activations\": ", json_list(sim.peak_activations), ",\n");
    out += cat("  \"peak_in_flight\": ", json_list(report.peak_in_flight), ",\n");
  }
  out += "  \"program\": [";
  for (size_t r = 0; r < s.program.size(); ++r) {
    out += r ? ",\n    [" : "\n    [";
    for (size_t i = 0; i < s.program[r].size(); ++i)
      out += (i ? ", " : "") + json_string(to_string(s.program[r][i]));
    out += "]";
  }
  out += "\n  ]\n}\n";
  return out;
}

}  // namespace pptrain::pipeline
