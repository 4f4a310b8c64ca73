// The schedule as an SVG picture in the style of the zero-bubble paper's figures: one row
// per rank, one box per compute action, the microbatch number inside.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "pipeline/render.h"

namespace pptrain::pipeline {

namespace {

struct Rgb {
  int r, g, b;
};

Rgb base_colour(Op op) {
  switch (op) {
    case Op::F: return {120, 170, 220};  // blue
    case Op::B: return {235, 140, 100};  // orange
    case Op::I: return {240, 200, 90};   // yellow
    case Op::W: return {130, 200, 130};  // green
    default: return {200, 200, 200};
  }
}

// A rank's later stages get darker shades of the same colour.
std::string colour(Op op, int chunk, int stages_per_rank) {
  Rgb c = base_colour(op);
  double shade = stages_per_rank > 1 ? 1.0 - 0.3 * chunk / (stages_per_rank - 1) : 1.0;
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", int(c.r * shade), int(c.g * shade),
                int(c.b * shade));
  return buffer;
}

std::string num(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", x);
  return buffer;
}

}  // namespace

std::string render_svg(const ScheduleReport& report) {
  PPTRAIN_CHECK(report.valid);
  const Schedule& s = report.schedule;
  const SimResult& sim = report.sim;
  const double span = std::max(sim.makespan, 1e-9);
  const double scale = std::clamp(1100.0 / span, 6.0, 60.0);  // pixels per time unit
  const double left = 70, top = 50, row = 26, gap = 6;
  const double width = left + span * scale + 20;
  const double legend_y = top + s.pp * (row + gap) + 10;
  const double height = legend_y + 40;

  std::string out = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", num(width),
                        "\" height=\"", num(height), "\" font-family=\"monospace\" font-size=\"11\">\n");
  out += cat("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  out += cat("<text x=\"10\" y=\"20\" font-size=\"13\">", s.name, "  pp=", s.pp,
             "  microbatches=", s.microbatches, "  stages/rank=", s.stages_per_rank,
             "  makespan=", format_number(sim.makespan),
             "  bubble=", format_number(sim.bubble_ratio), "</text>\n");
  out += cat("<text x=\"10\" y=\"36\" fill=\"#555555\">cost ", to_string(report.cost),
             "</text>\n");
  for (int r = 0; r < s.pp; ++r) {
    const double y = top + r * (row + gap);
    const std::vector<int> stages = stages_of_rank(s.placement, r, s.pp, s.stages_per_rank);
    out += cat("<text x=\"10\" y=\"", num(y + row * 0.65), "\">rank ", r, "</text>\n");
    out += cat("<rect x=\"", num(left), "\" y=\"", num(y), "\" width=\"", num(span * scale),
               "\" height=\"", num(row), "\" fill=\"#e8e8e8\"/>\n");
    for (const TimedAction& t : sim.timeline[r]) {
      const Action& a = t.action;
      if (!is_compute(a.op)) continue;
      int chunk = int(std::find(stages.begin(), stages.end(), a.stage) - stages.begin());
      const double x = left + t.start * scale, w = (t.end - t.start) * scale;
      out += cat("<rect x=\"", num(x), "\" y=\"", num(y), "\" width=\"", num(w), "\" height=\"",
                 num(row), "\" fill=\"", colour(a.op, chunk, s.stages_per_rank),
                 "\" stroke=\"white\" stroke-width=\"0.8\"><title>", to_string(a), " [",
                 format_number(t.start), ", ", format_number(t.end), ")</title></rect>\n");
      if (w >= 8 + 6 * std::to_string(a.microbatch).size())
        out += cat("<text x=\"", num(x + w / 2), "\" y=\"", num(y + row * 0.65),
                   "\" text-anchor=\"middle\">", a.microbatch, "</text>\n");
    }
  }
  double x = left;
  for (Op op : {Op::F, Op::B, Op::I, Op::W}) {
    const char* label = op == Op::F   ? "F forward"
                        : op == Op::B ? "B backward"
                        : op == Op::I ? "I input grad"
                                      : "W weight grad";
    out += cat("<rect x=\"", num(x), "\" y=\"", num(legend_y), "\" width=\"14\" height=\"14\" fill=\"",
               colour(op, 0, 1), "\"/><text x=\"", num(x + 18), "\" y=\"", num(legend_y + 11),
               "\">", label, "</text>\n");
    x += 130;
  }
  out += cat("<text x=\"", num(x), "\" y=\"", num(legend_y + 11),
             "\" fill=\"#555555\">darker: a rank's later stage; grey: idle</text>\n");
  out += "</svg>\n";
  return out;
}

}  // namespace pptrain::pipeline
