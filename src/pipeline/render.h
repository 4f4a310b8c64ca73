// Output formats of `pptrain schedule`: a text time line, JSON figures, an SVG picture and
// a Chrome trace (chrome://tracing, Perfetto).
#pragma once
#include <string>
#include <vector>

#include "pipeline/ir.h"
#include "pipeline/simulate.h"

namespace pptrain::pipeline {

struct ScheduleReport {
  Schedule schedule;  // as executed (lowered), or as given when invalid
  CostModel cost;
  bool valid = false;
  std::string error;                 // the validator's message when !valid
  SimResult sim;                     // when valid
  std::vector<double> peak_in_flight;  // [pp] when valid
};

// A per-rank time line grid (one column per time quantum, <stage><OP><mb> where an action
// starts, '-' while it runs, '.' idle), then the figures. Needs a valid report.
std::string render_text(const ScheduleReport& report);
// One JSON object: schedule, pp, microbatches, stages_per_rank, placement, valid, error,
// cost, makespan, bubble_ratio, span_bubble_ratio, busy, idle, span_idle,
// peak_activations, peak_in_flight (lists per rank) and program (action strings per rank).
std::string render_json(const ScheduleReport& report);
// Boxes per rank on a time axis: F, B, I, W in distinct colours (darker for a rank's later
// stages), the microbatch inside, idle time grey. Needs a valid report.
std::string render_svg(const ScheduleReport& report);
// Chrome trace JSON: one track per rank, one slice per compute action (1 cost unit = 1 ms),
// a flow arrow per message. Needs a valid report.
std::string render_chrome_trace(const ScheduleReport& report);

// JSON string literal with escapes.
std::string json_string(const std::string& text);

}  // namespace pptrain::pipeline
