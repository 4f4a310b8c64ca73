// The performance model against a measured op profile: reading `logging.op_profile_file`,
// fitting an efficiency per op (calibration), comparing prediction and measurement op by op.
// Prediction and profile speak of the same calls with the same FLOPs and bytes
// (step_model.cpp), so an op's efficiency is simply its roofline time over its measured
// time, and a calibration fitted on one run predicts another run's ops from their rooflines.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json.h"
#include "perf_model.h"

namespace pptrain::bench {

namespace {

constexpr uint64_t kMaxJsonBytes = 1 << 20;  // a profile lists ~50 ops: a few KiB

double number_at(const YAML::Node& node, const std::string& key, const std::string& where) {
  const YAML::Node v = node[key];
  if (!v) fail(where, ": key '", key, "' is missing");
  const std::optional<double> x = json::as_number(v);
  if (!x || *x < 0) fail(where, ": key '", key, "': expected a number >= 0, got ", json::describe(v));
  return *x;
}

std::string string_at(const YAML::Node& node, const std::string& key, const std::string& where) {
  const YAML::Node v = node[key];
  if (!v || !json::is_string(v)) fail(where, ": key '", key, "': expected a string");
  return v.as<std::string>();
}

// Predicted calls and time per backend op.
struct PredictedOp {
  double calls = 0, ms = 0, roofline_ms = 0, flops = 0, bytes = 0;
};
std::map<std::string, PredictedOp> by_op(const StepPrediction& p) {
  std::map<std::string, PredictedOp> out;
  for (const OpLine& o : p.ops) {
    PredictedOp& x = out[o.op];
    x.calls += o.count;
    x.ms += o.ms;
    x.roofline_ms += o.roofline_ms;
    x.flops += o.flops;
    x.bytes += o.bytes;
  }
  return out;
}

}  // namespace

MeasuredProfile read_op_profile(const std::string& path) {
  const YAML::Node doc = json::parse_object(read_small_file(path, "op profile", kMaxJsonBytes), path);
  MeasuredProfile m;
  m.source = path;
  m.backend = string_at(doc, "backend", path);
  if (number_at(doc, "steps", path) < 1) fail(path, ": key 'steps': no step was profiled");
  m.step_ms = number_at(doc, "step_ms", path);
  m.busy_ms = number_at(doc, "busy_ms", path);
  const YAML::Node ops = doc["ops"];
  if (!ops || !ops.IsSequence()) fail(path, ": key 'ops': expected an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string where = path + ": ops[" + std::to_string(i) + "]";
    if (!ops[i].IsMap()) fail(where, ": expected an object");
    MeasuredOp op;
    op.op = string_at(ops[i], "op", where);
    if (!seen.insert(op.op).second) fail(where, ": op '", json::printable(op.op), "' listed twice");
    op.calls = number_at(ops[i], "calls_per_step", where);
    op.ms = number_at(ops[i], "ms_per_step", where);
    op.flops = number_at(ops[i], "flops_per_step", where);
    op.bytes = number_at(ops[i], "bytes_per_step", where);
    m.ops.push_back(op);
  }
  return m;
}

Calibration fit_calibration(const StepPrediction& p, const MeasuredProfile& m, const std::string& source) {
  const auto predicted = by_op(p);
  Calibration c;
  c.source = source;
  for (const MeasuredOp& op : m.ops) {
    auto it = predicted.find(op.op);
    if (it == predicted.end() || op.ms <= 0 || it->second.roofline_ms <= 0) continue;
    // Above 1 only if the measurement beat the roofline (a clock between the marks, a peak
    // understated): kept at 1, the roofline itself.
    c.efficiency[op.op] = std::min(1.0, it->second.roofline_ms / op.ms);
  }
  return c;
}

std::string calibration_json(const Calibration& c) {
  std::string out = "{\"source\": " + json::quote(c.source) + ", \"efficiency\": {";
  bool first = true;
  for (const auto& [op, e] : c.efficiency) {
    out += (first ? "" : ", ") + json::quote(op) + ": " + json::number(e);
    first = false;
  }
  return out + "}}";
}

Calibration read_calibration(const std::string& path) {
  const YAML::Node doc = json::parse_object(read_small_file(path, "calibration", kMaxJsonBytes), path);
  Calibration c;
  c.source = string_at(doc, "source", path);
  const YAML::Node e = doc["efficiency"];
  if (!e || !e.IsMap()) fail(path, ": key 'efficiency': expected an object of op: efficiency");
  for (const auto& kv : e) {
    const std::string op = kv.first.as<std::string>();
    const std::optional<double> x = json::as_number(kv.second);
    if (!x || !(*x > 0 && *x <= 1))
      fail(path, ": key 'efficiency.", json::printable(op), "': expected a number in (0, 1], got ",
           json::describe(kv.second));
    c.efficiency[op] = *x;
  }
  return c;
}

ProfileComparison compare_with_profile(const StepPrediction& p, const MeasuredProfile& m, double op_tolerance,
                                       double step_tolerance, double min_share) {
  const auto predicted = by_op(p);
  ProfileComparison r;
  r.predicted_step_ms = p.step_ms;
  r.measured_step_ms = m.step_ms;
  r.step_within = m.step_ms > 0 && std::fabs(p.step_ms / m.step_ms - 1) <= step_tolerance;
  r.ops_within = true;
  r.calls_agree = true;
  r.work_agrees = true;
  // The profile's FLOPs and bytes are printed to 17 digits, sums in another order: 1e-9.
  auto same = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); };
  std::vector<MeasuredOp> measured = m.ops;
  std::stable_sort(measured.begin(), measured.end(), [](const MeasuredOp& a, const MeasuredOp& b) { return a.ms > b.ms; });
  std::set<std::string> listed;
  for (const MeasuredOp& op : measured) {
    OpComparison c;
    c.op = op.op;
    c.measured_calls = op.calls;
    c.measured_ms = op.ms;
    c.share = m.step_ms > 0 ? op.ms / m.step_ms : 0;
    auto it = predicted.find(op.op);
    c.measured_flops = op.flops;
    c.measured_bytes = op.bytes;
    if (it != predicted.end()) {
      c.predicted_calls = it->second.calls, c.predicted_ms = it->second.ms;
      c.predicted_flops = it->second.flops, c.predicted_bytes = it->second.bytes;
    }
    c.work_agrees = same(c.predicted_flops, c.measured_flops) && same(c.predicted_bytes, c.measured_bytes);
    r.work_agrees = r.work_agrees && c.work_agrees;
    c.checked = c.share >= min_share;
    if (c.checked) c.within = c.measured_ms > 0 && std::fabs(c.predicted_ms / c.measured_ms - 1) <= op_tolerance;
    // The profile prints calls per step to 2 decimals.
    if (std::fabs(c.predicted_calls - c.measured_calls) > 0.01) r.calls_agree = false;
    r.ops_within = r.ops_within && c.within;
    listed.insert(op.op);
    r.ops.push_back(c);
  }
  for (const auto& [op, x] : predicted) {
    if (listed.count(op)) continue;
    OpComparison c;
    c.op = op;
    c.predicted_calls = x.calls;
    c.predicted_ms = x.ms;
    c.predicted_flops = x.flops;
    c.predicted_bytes = x.bytes;
    c.work_agrees = false;
    r.calls_agree = false;
    r.work_agrees = false;
    r.ops.push_back(c);
  }
  return r;
}

}  // namespace pptrain::bench
