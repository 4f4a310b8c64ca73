#include "train/run_training.h"

#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

#include "backend/cpu/blas_setup.h"
#include "checkpoint/checkpoint_manager.h"
#include "core/error.h"
#include "core/log.h"
#include "model/dims.h"
#include "partition/partition.h"
#include "pipeline/chrome_trace.h"
#include "runtime/executor.h"
#include "runtime/timeline.h"
#include "runtime/watchdog.h"
#include "train/spike_guard.h"
#include "train/measured_memory.h"
#include "train/metrics.h"
#include "train/op_profile_report.h"
#include "train/param_dump.h"
#include "train/sample.h"
#include "train/stop_signals.h"

namespace pptrain {
namespace {

// The folders the outputs go to may not exist yet (runs/demo/ in a fresh checkout). World
// rank 0 creates them before any work, so a path that cannot be created fails in the first
// second, not at the first write hours later; the barrier orders the creation before any
// rank writes there (every rank writes a part of the trace).
void create_output_dirs(const Config& cfg, const std::string& dump_dir, Communicator& world) {
  if (world.rank() == 0) {
    const std::pair<const char*, std::string> outputs[] = {
        {"logging.metrics", std::filesystem::path(cfg.logging.metrics).parent_path().string()},
        {"logging.trace", std::filesystem::path(cfg.logging.trace).parent_path().string()},
        {"checkpoint.dir", cfg.checkpoint.dir},
        {"--dump", dump_dir}};
    for (const auto& [key, dir] : outputs) {
      if (dir.empty()) continue;
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) fail(key, ": cannot create directory '", dir, "': ", ec.message());
    }
  }
  world.barrier();
}

// Planted fault fail_at@RANK:STEP: that rank fails at that step, to check that one failing
// rank ends the whole job.
void maybe_inject_failure(const Faults& faults, int world_rank, int step) {
  if (const Fault* f = faults.find("fail_at"); f && std::stoi(f->target) == step)
    fail("injected failure on rank ", world_rank, " at step ", step, " (planted fault fail_at)");
}

// Planted fault freeze@RANK:STEP: the rank stops itself (SIGSTOP) at the start of that
// step, as a hung node would, for the watchdog's test.
void maybe_freeze(const Faults& faults, int step) {
  if (const Fault* f = faults.find("freeze"); f && std::stoi(f->target) == step) std::raise(SIGSTOP);
}

// After a stop signal: the checkpoint of `step` (whatever checkpoint.every says) and the
// one line that says how to go on. Collective. Returns the exit code: kExitStoppedEarly
// with a checkpoint to resume from; 1 without (checkpoint.dir unset), so that a job
// script never requeues a run that would start over.
int stop_early(int signal, int step, CheckpointManager& checkpoints, Trainer& trainer, bool rank0) {
  const Config& cfg = trainer.config();
  if (cfg.checkpoint.dir.empty()) {
    if (rank0)
      log::info("stopped by ", StopSignals::name(signal), " after step ", step, "/", cfg.training.steps,
                "; no checkpoint (checkpoint.dir is not set), so a rerun starts over (exit 1)");
    return 1;
  }
  const std::string path = checkpoints.save(trainer.params(), trainer.optimizer().state(), step);
  if (rank0)
    log::info("stopped by ", StopSignals::name(signal), " after step ", step, "/", cfg.training.steps,
              "; checkpoint ", path, "; resume with resume: auto (exit ", kExitStoppedEarly, ")");
  return kExitStoppedEarly;
}

// One trace for the whole job: every rank writes its events to PATH.rankR.part, world
// rank 0 joins the parts into PATH and removes them.
void write_trace(const std::string& path, const pipeline::ChromeTrace& trace, Communicator& world) {
  const std::string part = cat(path, ".rank", world.rank(), ".part");
  {
    std::ofstream out(part);
    out << trace.events();
    if (!out) fail("logging.trace: cannot write '", part, "'");
  }
  world.barrier();
  if (world.rank() == 0) {
    std::vector<std::string> fragments;
    for (int r = 0; r < world.size(); ++r) {
      const std::string p = cat(path, ".rank", r, ".part");
      std::ifstream in(p);
      fragments.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      std::filesystem::remove(p);
    }
    std::ofstream out(path);
    out << pipeline::ChromeTrace::document(fragments);
    if (!out) fail("logging.trace: cannot write '", path, "'");
  }
  world.barrier();
}

// The startup line (world rank 0): model, layout, schedule, backend and transport.
void log_startup(Job& job) {
  const Config& cfg = job.config();
  const ModelConfig& m = cfg.model;
  // llama: its key/value heads (grouped-query attention) and SwiGLU width.
  const std::string llama = m.llama() ? cat(" (", m.kv_heads(), " kv), ffn ", m.mlp_hidden()) : "";
  log::info("pptrain: ", m.arch, ", ", m.n_layer, " layers, d_model ", m.d_model, ", ", m.n_head, " heads", llama,
            ", seq ", m.seq_len, ", vocab ", m.vocab_size, " | dp ", cfg.parallel.dp, " pp ",
            cfg.parallel.pp, " tp ", cfg.parallel.tp, " | schedule ", cfg.parallel.schedule, ", ",
            cfg.parallel.microbatches, " microbatches, blocks per stage ", blocks_text(blocks_per_stage(cfg)),
            " | backend ", job.ops().name(), " ", cfg.training.precision, " | comm ", job.transport(), " | attention ",
            cfg.model.attention, m.attention_default.empty() ? "" : cat(" (", m.attention_default, ")"), " | recompute per stage ", ModelDims::recompute_per_stage_text(cfg));
  // On cpu, what the ops run on: rank 0's BLAS core and SGEMM rate against the CPU's peak
  // (a 1024^3 SGEMM, 512^3 on one thread: milliseconds), so a slow kernel choice shows at once.
  if (cfg.device == "cpu" && job.world().rank() == 0) log::info(cpu::cpu_summary_line(true));
}

// A step whose loss SpikeGuard judged a spike.
struct Spike {
  int step;
  double loss, mean;
};

// training.on_spike after `spike` (every rank alike: the loss is the same on all): false
// when the run must stop (on_spike: stop, or training.max_rollbacks used up), after one
// line; for rollback, the newest checkpoint is loaded and the batches from it to the
// spike are skipped, so the steps after it see data the diverged ones did not (PaLM).
bool recover_from_spike(const Spike& spike, Trainer& trainer, CheckpointManager& checkpoints, const Config& cfg,
                        int& rollbacks, bool rank0) {
  const TrainingConfig& t = cfg.training;
  const std::string what =
      cat("loss spike at step ", spike.step, ": loss ", spike.loss, " is above ", t.spike_factor,
          " x the running mean ", spike.mean, " of the losses before it (training.spike_factor, spike_window ",
          t.spike_window, ")");
  if (t.on_spike == "stop") {
    if (rank0)
      log::error(what, "; stopped without saving (training.on_spike: stop): lower training.lr, or set "
                 "training.on_spike: rollback");
    return false;
  }
  if (rollbacks >= t.max_rollbacks) {
    if (rank0)
      log::error(what, "; stopped without saving: ", rollbacks, " rollbacks already (training.max_rollbacks ",
                 t.max_rollbacks, ")");
    return false;
  }
  const int64_t next_batch = spike.step + checkpoints.data_offset();  // the first batch no step has read
  const CheckpointManager::Rollback back = checkpoints.rollback(trainer.params(), trainer.optimizer().state());
  const int64_t first_skipped = back.step + checkpoints.data_offset();
  ++rollbacks;
  trainer.set_step(back.step);
  checkpoints.set_data_offset(next_batch - back.step);
  trainer.set_data_offset(next_batch - back.step);
  if (rank0)
    log::warn(what, "; rolled back to ", back.path, " (step ", back.step, "), skipping global batches ",
              first_skipped, " to ", next_batch - 1, " (rollback ", rollbacks, " of at most ", t.max_rollbacks,
              ")");
  return true;
}

// What the loop does with each step's result once it is known — at once when synchronous,
// one train_step later under post-validation: the timing, the metrics line and the
// after_step hook; and once the trainer's state is settled at that step, the parameter
// dump, the evaluation, and the checkpoint or the early stop.
class StepResults {
 public:
  StepResults(Job& job, Trainer& trainer, CheckpointManager& checkpoints, const TrainingHooks& hooks,
              Progress& progress)
      : job_(job), cfg_(job.config()), trainer_(trainer), checkpoints_(checkpoints), hooks_(hooks),
        progress_(progress), metrics_(cfg_.logging.metrics, job.world().rank() == 0),
        guard_(cfg_.training.spike_factor, cfg_.training.spike_window) {}

  // Returns true when the run ends after this step (a stop signal, hooks.stop_after).
  bool take(const StepResult& r) {
    const bool final = r.step == cfg_.training.steps;
    const int stop = final ? 0 : r.stop_signal;  // the last step ends the run anyway
    // Under post-validation a later step may already be applied: then only report.
    const bool settled = !trainer_.has_pending();
    if (r.step > 1 || cfg_.training.steps == 1) { total_ms_ += r.ms; ++timed_steps_; }  // step 1 warms up
    if (r.step % cfg_.logging.every == 0 || final || r.step == 1 || stop) {
      metrics_.step(r, cfg_.training.steps, tokens_per_step(), timed_steps_ ? total_ms_ / timed_steps_ : r.ms,
                    job_.predicted_step_ms());
      // mem_peak of the next logged step covers the steps after this one. (Under
      // post-validation this result arrives one step late: the window then starts inside
      // the step after it.)
      job_.ops().reset_peak_memory();
    }
    // A spike is neither evaluated nor saved: a checkpoint of a diverged state never pushes
    // a good one out of keep_last. The loop acts on it (recover_from_spike).
    if (!r.skipped && cfg_.training.on_spike != "off")
      if (const std::optional<double> mean = guard_.check(r.loss)) {
        spike_ = Spike{r.step, r.loss, *mean};
        return false;
      }
    if (settled) dump_and_evaluate(r.step, r.loss, final);
    if (settled && !final) sample_along_the_way(r.step);
    if (hooks_.after_step) hooks_.after_step(trainer_, r);
    if (!settled) return false;
    // A save reports its phases to the watchdog (CheckpointManager::set_progress) and
    // stores the spike guard's state.
    const bool saves = stop || checkpoints_.due(r.step, final);
    if (saves) checkpoints_.set_spike_guard(guard_.state());
    if (stop) stop_code_ = stop_early(stop, r.step, checkpoints_, trainer_, job_.world().rank() == 0);
    // Only a save asks for the parameters: Trainer::params() waits for ZeRO-1's all-gathers,
    // which otherwise overlap the next step's start.
    else if (checkpoints_.due(r.step, final))
      checkpoints_.after_step(trainer_.params(), trainer_.optimizer().state(), r.step, final);
    stopped_by_ = stop;
    return stop || r.step == hooks_.stop_after;
  }

  // Whether the run needs the trainer's state exactly after `step` (post-validation then
  // settles it at once): the last step, evaluations, checkpoints, hooks.stop_after and the
  // parameter dumps of every step.
  bool needs_settled(int step) const {
    const int ev = cfg_.training.eval_every;
    const bool final = step == cfg_.training.steps;
    return final || step == hooks_.stop_after || !hooks_.dump_dir.empty() || (ev > 0 && step % ev == 0) ||
           checkpoints_.due(step, final);
  }

  // The guard's state from a checkpoint (resume, rollback).
  void restore_guard(const std::string& state) { guard_.restore(state); }
  // The spike the last take() found (cleared by reading it).
  std::optional<Spike> take_spike() { return std::exchange(spike_, std::nullopt); }
  int stopped_by() const { return stopped_by_; }
  int stop_code() const { return stop_code_; }

 private:
  double tokens_per_step() const { return double(cfg_.global_batch_sequences()) * cfg_.model.seq_len; }

  void dump_and_evaluate(int step, double loss, bool final) {
    if (!hooks_.dump_dir.empty()) {
      trainer_.gather_gradients();  // ZeRO-1: every range's sums
      std::optional<Buffer<float>> masters = trainer_.gathered_masters();  // sharded masters: every range's
      if (job_.parallel().dp_rank == 0)
        write_param_dump(cat(hooks_.dump_dir, "/step", step, ".rank", job_.world().rank(), ".bin"), loss,
                         trainer_.params(), masters ? &*masters : nullptr);
    }
    const int ev = cfg_.training.eval_every;
    if (ev > 0 && (step % ev == 0 || final)) {
      const double val = trainer_.evaluate();
      if (!std::isnan(val)) metrics_.eval(step, val);
    }
  }

  // logging.sample_every: a byte-level run shows what it writes so far (the last step's
  // sample comes after the loop, as without the key).
  void sample_along_the_way(int step) {
    const LoggingConfig& l = cfg_.logging;
    if (l.sample_every <= 0 || step % l.sample_every != 0 || !samples_text(cfg_)) return;
    progress_.set_activity(cat("step ", step, ": sample of ", l.sample_tokens, " bytes"));
    const std::string text = generate_sample(trainer_, l.sample_tokens, &progress_);
    if (job_.world().rank() == 0 && !text.empty()) log::info("sample at step ", step, ":\n", text);
  }

  Job& job_;
  const Config& cfg_;
  Trainer& trainer_;
  CheckpointManager& checkpoints_;
  const TrainingHooks& hooks_;
  Progress& progress_;
  MetricsLog metrics_;
  double total_ms_ = 0;
  int timed_steps_ = 0, stopped_by_ = 0, stop_code_ = 0;
  SpikeGuard guard_;
  std::optional<Spike> spike_;
};

}  // namespace

int run_training(Job& job, const TrainingHooks& hooks) {
  // First: a signal during startup already counts (the run then stops after one step).
  StopSignals stop_signals;
  const Config& cfg = job.config();
  const ParallelContext& par = job.parallel();
  const int world_rank = job.world().rank();
  const bool rank0 = world_rank == 0;
  create_output_dirs(cfg, hooks.dump_dir, job.world());
  Trainer trainer(job);
  CheckpointManager checkpoints(cfg, par, job.faults());
  const int resumed_from = checkpoints.resume(trainer.params(), trainer.optimizer().state());
  trainer.set_step(resumed_from);
  if (rank0) {
    log_startup(job);
    if (resumed_from > 0) log::info("resumed from step ", resumed_from);
  }
  if (hooks.after_resume) hooks.after_resume(trainer, resumed_from);

  pipeline::ChromeTrace trace;
  trace.process_name(world_rank, cat("rank ", world_rank, " (dp ", par.dp_rank, " pp ", par.pp_rank, " tp ",
                                     par.tp_rank, ")"));
  trace.thread_name(world_rank, 0, cfg.device == "cuda" ? "compute actions (device time, aligned at the pipeline's end)"
                                                        : "compute actions");
  trace.thread_name(world_rank, PipelineExecutor::kWaitTrack, "the host's waits for receives");
  if (cfg.zero_shards_moments()) trace.thread_name(world_rank, 1, "ZeRO-1 reduce-scatters in flight");
  if (cfg.parallel.pp > 1)
    trace.thread_name(world_rank, PipelineExecutor::kTransferTrack,
                      "pipeline transfers, from posting to completion seen");
  if (cfg.logging.op_profile > 0)
    trace.thread_name(world_rank, OpProfileWindow::kOpTrack,
                      cfg.device == "cuda" ? "ops of the profiled steps (device time, aligned at the step's end)"
                                           : "ops of the profiled steps");
  if (cfg.logging.kernel_profile)
    trace.thread_name(world_rank, OpProfileWindow::kKernelTrack,
                      "kernels of the profiled steps, per op (device records, aligned at the step's end)");
  double trace_offset_us = 0;
  // Progress is reported only when someone watches it (runtime.watchdog_s > 0).
  Progress progress;
  if (cfg.runtime.watchdog_s > 0) {
    trainer.set_progress(&progress);
    checkpoints.set_progress([&progress](const std::string& phase) {
      progress.set_activity(phase);
      progress.tick();
    });
  }
  auto watchdog = std::make_unique<Watchdog>(progress, cfg.runtime.watchdog_s, world_rank);
  StepResults results(job, trainer, checkpoints, hooks, progress);
  bool memory_logged = false;
  OpProfileWindow op_profile(job, trainer.step());
  trainer.set_data_offset(checkpoints.data_offset());
  results.restore_guard(checkpoints.loaded_spike_guard());
  int rollbacks = 0;
  bool spike_stop = false;
  // Takes one step's result; true when the loop ends.
  auto take = [&](const StepResult& r) {
    if (results.take(r)) return true;
    const std::optional<Spike> spike = results.take_spike();
    if (!spike) return false;
    if (trainer.has_pending()) (void)trainer.settle();  // post-validation: the step after it is undone too
    spike_stop = !recover_from_spike(*spike, trainer, checkpoints, cfg, rollbacks, rank0);
    if (!spike_stop) results.restore_guard(checkpoints.loaded_spike_guard());  // as it was at that checkpoint
    return spike_stop;
  };
  while (trainer.step() < cfg.training.steps) {
    maybe_inject_failure(job.faults(), world_rank, trainer.step() + 1);
    maybe_freeze(job.faults(), trainer.step() + 1);
    const int making = trainer.step() + 1;
    if (!hooks.step_from.empty() && making > 1)
      checkpoints.load_step_state(hooks.step_from, making - 1, trainer.params(), trainer.optimizer().state());
    op_profile.before(making);
    const std::optional<StepResult> r = trainer.train_step();
    op_profile.after(making);
    // After the first step every buffer exists (slot pools and bf16 copies grow in it).
    if (!memory_logged) {
      log_memory_reports(job, trainer.optimizer());
      memory_logged = true;
    }
    if (!cfg.logging.trace.empty()) {
      add_to_trace(trainer.timeline(), world_rank, trace_offset_us, trace);
      trace_offset_us += trainer.timeline_ms() * 1000.0;
      op_profile.add_to_trace(trace, world_rank, trace_offset_us);
    }
    if (r && take(*r)) break;
    // Post-validation: settle where the run needs this step's state, and after a stop
    // signal (the stop then follows the pending step, which still sees the signal).
    if (trainer.has_pending() && (results.needs_settled(trainer.step()) || (r && r->stop_signal)) &&
        take(*trainer.settle()))
      break;
  }
  PPTRAIN_CHECK(!trainer.has_pending(), "the training loop ended with step ", trainer.step(), " unsettled");
  op_profile.finish();
  watchdog.reset();  // joined: the trace and the sample below have no progress points
  trainer.set_progress(nullptr);
  checkpoints.set_progress(nullptr);
  if (hooks.at_end) hooks.at_end(trainer);
  if (!cfg.logging.trace.empty()) write_trace(cfg.logging.trace, trace, job.world());
  if (results.stopped_by()) return results.stop_code();
  if (spike_stop) return 1;
  if (samples_text(cfg)) {
    const std::string text = generate_sample(trainer, cfg.logging.sample_tokens);
    if (rank0 && !text.empty()) log::info("sample:\n", text);
  }
  return 0;
}

}  // namespace pptrain
