// ProfiledOps (profiled_ops.h) and the default op clock of Ops.
#include "backend/profiled_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace pptrain {

namespace {

// The host's steady clock: right where an op has finished when its call returns (cpu).
class HostOpClock final : public OpClock {
 public:
  void mark(size_t i) override {
    if (i >= marks_.size()) marks_.resize(i + 1);
    marks_[i] = std::chrono::steady_clock::now();
  }
  std::vector<double> resolve(size_t n) override {
    PPTRAIN_CHECK(n <= marks_.size(), "op clock: ", n, " marks resolved, ", marks_.size(), " recorded");
    std::vector<double> ms(n);
    for (size_t i = 0; i < n; ++i) ms[i] = std::chrono::duration<double, std::milli>(marks_[i] - marks_[0]).count();
    return ms;
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

const char* const kOpNames[] = {
#define PPTRAIN_OP_NAME(ret, name, params, args) #name,
    PPTRAIN_EACH_OP(PPTRAIN_OP_NAME)
#undef PPTRAIN_OP_NAME
        "copy_to_device",
    "copy_to_host", "copy", "zero", "prepare_linear_weight"};
static_assert(std::size(kOpNames) == size_t(OpId::count));

}  // namespace

std::unique_ptr<OpClock> Ops::make_op_clock() { return std::make_unique<HostOpClock>(); }

std::unique_ptr<KernelRecorder> Ops::make_kernel_recorder() {
  fail("logging.kernel_profile: the ", name(), " backend runs no kernels to record (device: cuda has them)");
}

const char* op_name(OpId id) { return kOpNames[size_t(id)]; }

ProfiledOps::ProfiledOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)), clock_(inner_->make_op_clock()) {}
ProfiledOps::~ProfiledOps() = default;

ProfiledOps::Timed::Timed(ProfiledOps& p_, OpId id, OpCost cost) : p(p_), on(p_.active_) {
  if (!on) return;
  p.clock_->mark(2 * p.calls_.size());
  if (p.recorder_) p.recorder_->begin_call(p.calls_.size());
  p.calls_.emplace_back(id, cost);
}
ProfiledOps::Timed::~Timed() {
  if (!on) return;
  if (p.recorder_) p.recorder_->end_call();
  p.clock_->mark(2 * p.calls_.size() - 1);
}

void ProfiledOps::record_kernels() {
  if (!recorder_) recorder_ = inner_->make_kernel_recorder();
}

void ProfiledOps::copy_to_device(void* d, const void* s, size_t n) {
  Timed timed(*this, OpId::copy_to_device, {0, double(n)});
  inner_->copy_to_device(d, s, n);
}
void ProfiledOps::copy_to_host(void* d, const void* s, size_t n) {
  Timed timed(*this, OpId::copy_to_host, {0, double(n)});
  inner_->copy_to_host(d, s, n);
}
void ProfiledOps::copy(void* d, const void* s, size_t n) {
  Timed timed(*this, OpId::copy, {0, 2.0 * n});
  inner_->copy(d, s, n);
}
void ProfiledOps::zero(void* p, size_t n) {
  Timed timed(*this, OpId::zero, {0, double(n)});
  inner_->zero(p, n);
}

bool ProfiledOps::prepare_linear_weight(ConstView w, int rows, int in, int out, bool dgrad) {
  // Its bytes: the weight read and its copy written (where the backend makes one).
  Timed timed(*this, OpId::prepare_linear_weight, {0, 2.0 * double(in) * out * dtype_size(w.dtype)});
  return inner_->prepare_linear_weight(w, rows, in, out, dgrad);
}

void ProfiledOps::begin_step() {
  PPTRAIN_CHECK(!active_, "op profile: begin_step twice");
  calls_.clear();
  // Recording is on for the profiled steps only; what ran before (the previous profiled
  // step's tail, evaluation) is not this step's.
  if (recorder_) {
    (void)recorder_->collect();
    recorder_->start();
  }
  active_ = true;
}

void ProfiledOps::end_step(double step_ms) {
  PPTRAIN_CHECK(active_, "op profile: end_step without begin_step");
  active_ = false;
  const std::vector<double> t = clock_->resolve(2 * calls_.size());
  last_step_.clear();
  for (size_t k = 0; k < calls_.size(); ++k) {
    last_step_.push_back({calls_[k].first, t[2 * k], t[2 * k + 1]});
    OpStats& s = stats_[size_t(calls_[k].first)];
    s.calls += 1;
    s.ms += t[2 * k + 1] - t[2 * k];
    s.flops += calls_[k].second.flops;
    s.bytes += calls_[k].second.bytes;
  }
  if (recorder_) {
    std::vector<const char*> call_ops;
    for (const auto& [id, cost] : calls_) call_ops.push_back(op_name(id));
    kernels_.add_step(recorder_->collect(), call_ops);
    recorder_->stop();
  }
  ++steps_;
  step_ms_ += step_ms;
}

double ProfiledOps::busy_ms() const {
  return std::accumulate(stats_.begin(), stats_.end(), 0.0, [](double a, const OpStats& s) { return a + s.ms; });
}

namespace {

// The ops that ran, by time spent, longest first.
std::vector<size_t> by_time(const std::array<ProfiledOps::OpStats, size_t(OpId::count)>& stats) {
  std::vector<size_t> order;
  for (size_t i = 0; i < stats.size(); ++i)
    if (stats[i].calls) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return stats[a].ms > stats[b].ms; });
  return order;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

std::string ProfiledOps::table(int world_rank, double ceiling) const {
  if (steps_ == 0) return cat("op profile, rank ", world_rank, ": no step profiled");
  const double per = 1.0 / steps_, step = step_ms_ * per, busy = busy_ms() * per;
  std::string out = cat("op profile, rank ", world_rank, ", ", steps_, steps_ == 1 ? " step" : " steps", " of ",
                        fmt("%.2f", step), " ms: ops busy ", fmt("%.2f", busy), " ms (",
                        fmt("%.1f", step > 0 ? 100 * busy / step : 0.0), "% of the step, ", name(), ")",
                        ceiling > 0 ? cat("; GEMM ceiling ", fmt("%.0f", ceiling), " GFLOP/s (sgemm measured)") : "",
                        "\n");
  char line[200];
  std::snprintf(line, sizeof line, "  %-36s %8s %10s %7s %10s %8s %9s\n", "op", "calls", "ms/step", "share",
                "GFLOP/s", "of ceil", "GB/s");
  out += line;
  for (size_t i : by_time(stats_)) {
    const OpStats& s = stats_[i];
    const double seconds = s.ms / 1e3;
    const double gflops = s.flops > 0 && seconds > 0 ? s.flops / seconds / 1e9 : 0;
    const double gbs = s.bytes > 0 && seconds > 0 ? s.bytes / seconds / 1e9 : 0;
    std::snprintf(line, sizeof line, "  %-36s %8.0f %10.3f %6.1f%% %10s %8s %9s\n", op_name(OpId(i)),
                  s.calls * per, s.ms * per, step > 0 ? 100 * s.ms * per / step : 0.0,
                  gflops > 0 ? fmt("%.1f", gflops).c_str() : "-",
                  gflops > 0 && ceiling > 0 ? fmt("%.2f", gflops / ceiling).c_str() : "-",
                  gbs > 0 ? fmt("%.1f", gbs).c_str() : "-");
    out += line;
  }
  if (recorder_) out += kernels_.table(step);
  else out.pop_back();  // the last newline: log lines add their own
  return out;
}

std::string ProfiledOps::json(int world_rank, double ceiling) const {
  const double per = steps_ ? 1.0 / steps_ : 0, step = step_ms_ * per, busy = busy_ms() * per;
  std::string out = cat("{\"rank\": ", world_rank, ", \"backend\": \"", name(), "\", \"steps\": ", steps_,
                        ", \"step_ms\": ", fmt("%.4f", step), ", \"busy_ms\": ", fmt("%.4f", busy),
                        ", \"busy_fraction\": ", fmt("%.4f", step > 0 ? busy / step : 0.0),
                        ", \"gemm_ceiling_gflops\": ", fmt("%.2f", ceiling), ", \"ops\": [");
  bool first = true;
  for (size_t i : by_time(stats_)) {
    const OpStats& s = stats_[i];
    const double seconds = s.ms / 1e3;
    out += cat(first ? "" : ", ", "{\"op\": \"", op_name(OpId(i)), "\", \"calls_per_step\": ",
               fmt("%.2f", s.calls * per), ", \"ms_per_step\": ", fmt("%.4f", s.ms * per),
               ", \"share\": ", fmt("%.4f", step > 0 ? s.ms * per / step : 0.0),
               ", \"gflops\": ", fmt("%.3f", seconds > 0 ? s.flops / seconds / 1e9 : 0.0),
               ", \"gbs\": ", fmt("%.3f", seconds > 0 ? s.bytes / seconds / 1e9 : 0.0),
               ", \"flops_per_step\": ", fmt("%.17g", s.flops * per), ", \"bytes_per_step\": ",
               fmt("%.17g", s.bytes * per), "}");
    first = false;
  }
  return out + "]" + (recorder_ ? ", " + kernels_.json_fields(step) : std::string()) + "}";
}

}  // namespace pptrain
