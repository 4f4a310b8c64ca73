// OpProfileWindow (op_profile_report.h).
#include "train/op_profile_report.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include "backend/cpu/blas_setup.h"
#include "core/error.h"
#include "core/log.h"

namespace pptrain {

OpProfileWindow::OpProfileWindow(Job& job, int first_step)
    : job_(job), first_(first_step + 2), count_(job.config().logging.op_profile) {}

void OpProfileWindow::before(int step) {
  if (!in_window(step)) return;
  // A rank's step starts when its ops may: what the backend still runs from before is not
  // the step's (the previous step's last kernels, on cuda).
  job_.ops().synchronize();
  job_.op_profiler()->begin_step();
  t0_ = std::chrono::steady_clock::now();
}

void OpProfileWindow::after(int step) {
  traced_step_ = in_window(step);
  if (!in_window(step)) return;
  // The step's wall time includes the backend's finishing its work.
  job_.ops().synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  job_.op_profiler()->end_step(ms);
  if (step == first_ + count_ - 1) report();
}

void OpProfileWindow::add_to_trace(pipeline::ChromeTrace& trace, int pid, double step_end_us) {
  if (!traced_step_) return;
  traced_step_ = false;
  const auto& calls = job_.op_profiler()->last_step();
  if (calls.empty()) return;
  double last_end = 0;
  for (const auto& c : calls) last_end = std::max(last_end, c.end_ms);
  for (const auto& c : calls)
    trace.slice(op_name(c.op), "op", pid, kOpTrack, step_end_us - (last_end - c.start_ms) * 1000.0,
                (c.end_ms - c.start_ms) * 1000.0);
  const KernelProfile* kernels = job_.op_profiler()->kernels();
  if (!kernels || kernels->last_step().empty()) return;
  double kernels_end = 0;
  for (const auto& k : kernels->last_step()) kernels_end = std::max(kernels_end, k.end_ms);
  for (const auto& k : kernels->last_step())
    trace.slice(k.op + ": " + k.kernel, "kernel", pid, kKernelTrack,
                step_end_us - (kernels_end - k.start_ms) * 1000.0, (k.end_ms - k.start_ms) * 1000.0);
}

void OpProfileWindow::finish() {
  if (job_.op_profiler() && !reported_) report();
}

void OpProfileWindow::report() {
  reported_ = true;
  const Config& cfg = job_.config();
  MpiComm& world = job_.world();
  ProfiledOps& p = *job_.op_profiler();
  // The GEMM ceiling on cpu: a large SGEMM on this rank's threads, measured now.
  const double ceiling = cfg.device == "cpu" ? cpu::measure_sgemm_gflops(1024, 3) : 0.0;
  const std::string table = p.table(world.rank(), ceiling);
  if (!cfg.logging.op_profile_file.empty()) {
    const std::string path = world.rank() == 0 ? cfg.logging.op_profile_file
                                               : cat(cfg.logging.op_profile_file, ".rank", world.rank());
    std::ofstream out(path);
    out << p.json(world.rank(), ceiling) << "\n";
    out.close();
    if (!out) fail("logging.op_profile_file: cannot write '", path, "' (rank ", world.rank(), ")");
  }
  // Rank 0 prints every rank's table in rank order: the others send theirs (length, text).
  constexpr int kTag = 7151;  // world carries nothing else at this point; a tag of its own anyway
  if (world.rank() != 0) {
    const uint64_t n = table.size();
    world.isend(&n, sizeof n, 0, kTag)->wait();
    world.isend(table.data(), n, 0, kTag)->wait();
  } else {
    log::info(table);
    for (int r = 1; r < world.size(); ++r) {
      uint64_t n = 0;
      world.irecv(&n, sizeof n, r, kTag)->wait();
      std::string text(n, '\0');
      world.irecv(text.data(), n, r, kTag)->wait();
      log::info(text);
    }
  }
  world.barrier();
}

}  // namespace pptrain
