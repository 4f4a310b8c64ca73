// pptrain train CONFIG [section.key=value ...] [--dump DIR]
// Every rank parses the config and builds its part of the model; world rank 0 prints.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "backend/ops.h"
#include "checkpoint/checkpoint_manager.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/faults.h"
#include "core/log.h"
#include "parallel/mpi_session.h"
#include "partition/partition.h"
#include "runtime/job_layout.h"
#include "train/metrics.h"
#include "train/param_dump.h"
#include "train/sample.h"
#include "train/trainer.h"
#ifdef PPTRAIN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace pptrain {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string dump_dir;  // write parameter dumps after every step (tests)
};

TrainArgs parse_args(const Args& args) {
  TrainArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--dump") {
      if (i + 1 >= args.size()) fail("train: --dump needs a directory");
      out.dump_dir = args[++i];
    } else if (a.rfind("--", 0) == 0) {
      fail("train: unknown option '", a, "' (expected CONFIG [section.key=value ...] [--dump DIR])");
    } else if (out.config.empty() && a.find('=') == std::string::npos) {
      out.config = a;
    } else {
      out.overrides.push_back(a);
    }
  }
  if (out.config.empty()) fail("train: missing CONFIG (usage: pptrain train CONFIG [section.key=value ...])");
  return out;
}

std::unique_ptr<Ops> make_ops(const Config& cfg) {
  if (cfg.device == "cpu") return make_cpu_ops();
#ifdef PPTRAIN_WITH_CUDA
  return make_cuda_ops(cfg);
#else
  fail(cfg.source, ": key 'device': cuda requested but this pptrain was built without CUDA (see pptrain --version; "
       "make CUDA=1 builds it)");
#endif
}

// Test hook: PPTRAIN_FAIL_AT="rank:step" makes that world rank fail at that step, to
// check that one failing rank ends the whole job.
void maybe_inject_failure(int world_rank, int step) {
  const char* spec = std::getenv("PPTRAIN_FAIL_AT");
  if (!spec) return;
  int rank = -1, at = -1;
  if (std::sscanf(spec, "%d:%d", &rank, &at) == 2 && rank == world_rank && at == step)
    fail("injected failure on rank ", world_rank, " at step ", step, " (PPTRAIN_FAIL_AT)");
}

void write_trace(const std::string& path, const std::string& events, Communicator& world) {
  const std::string part = cat(path, ".rank", world.rank(), ".part");
  {
    std::ofstream out(part);
    out << events;
    if (!out) fail("logging.trace: cannot write '", part, "'");
  }
  world.barrier();
  if (world.rank() == 0) {
    std::ofstream out(path);
    out << "{\"traceEvents\": [\n";
    for (int r = 0; r < world.size(); ++r) {
      std::string p = cat(path, ".rank", r, ".part");
      std::ifstream in(p);
      std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      out << (r ? ",\n" : "") << body;
      std::filesystem::remove(p);
    }
    out << "\n], \"displayTimeUnit\": \"ms\"}\n";
    if (!out) fail("logging.trace: cannot write '", path, "'");
  }
  world.barrier();
}

// The folders the outputs go to may not exist yet (runs/demo/ in a fresh checkout). World
// rank 0 creates them before any work, so a path that cannot be created fails in the first
// second, not at the first write hours later; the barrier orders the creation before any
// rank writes there (every rank writes a part of the trace).
void create_output_dirs(const Config& cfg, Communicator& world) {
  if (world.rank() == 0) {
    const std::pair<const char*, std::string> outputs[] = {
        {"logging.metrics", std::filesystem::path(cfg.logging.metrics).parent_path().string()},
        {"logging.trace", std::filesystem::path(cfg.logging.trace).parent_path().string()},
        {"checkpoint.dir", cfg.checkpoint.dir}};
    for (const auto& [key, dir] : outputs) {
      if (dir.empty()) continue;
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) fail(key, ": cannot create directory '", dir, "': ", ec.message());
    }
  }
  world.barrier();
}

}  // namespace

int cmd_train(const Args& raw_args, MpiSession& mpi) {
  const TrainArgs args = parse_args(raw_args);
  // Planted faults (tests of the tests): parsed once, announced, handed to where they act.
  const Faults all_faults = Faults::from_env();
  const Config cfg = load_config(args.config, args.overrides);
  JobLayout layout(cfg);
  create_output_dirs(cfg, layout.world());
  ParallelContext& par = layout.parallel();
  auto ops = make_ops(cfg);
#ifdef PPTRAIN_WITH_CUDA
  // On GPUs the pp, tp, dp and embedding groups talk over NCCL (MPI stays the bootstrap);
  // in pptrain-emu over the emulated NCCL, which runs on MPI.
  std::optional<NcclGroups> nccl;
  if (cfg.device == "cuda") nccl.emplace(layout.grid(), *ops, par);
  const char* transport = nccl ? "nccl" : "mpi";  // for the startup line
#else
  const char* transport = "mpi";
#endif
  all_faults.announce(mpi.rank());
  const Faults faults = all_faults.on_rank(mpi.rank());
  Trainer trainer(cfg, par, *ops, faults);
  CheckpointManager checkpoints(cfg, par, faults);
  const int resumed_from = checkpoints.resume(trainer);  // sets trainer.step()

  const bool rank0 = mpi.rank() == 0;
  if (rank0) {
    size_t n = 0;
    for (auto& [name, p] : trainer.params().all()) n += p->numel();
    auto cut = blocks_per_stage(cfg);
    std::string cut_text;
    for (int c : cut) cut_text += cat(cut_text.empty() ? "" : ",", c);
    log::info("pptrain: ", cfg.model.n_layer, " layers, d_model ", cfg.model.d_model, ", ", cfg.model.n_head,
              " heads, seq ", cfg.model.seq_len, ", vocab ", cfg.model.vocab_size, " | dp ", cfg.parallel.dp,
              " pp ", cfg.parallel.pp, " tp ", cfg.parallel.tp, " | schedule ", cfg.parallel.schedule, ", ",
              cfg.parallel.microbatches, " microbatches, blocks per stage [", cut_text, "] | backend ",
              ops->name(), " ", cfg.training.precision, " | comm ", transport);
    if (resumed_from > 0) log::info("resumed from step ", resumed_from);
  }
  MetricsLog metrics(cfg.logging.metrics, rank0);
  if (!args.dump_dir.empty()) std::filesystem::create_directories(args.dump_dir);
  const double tokens_per_step = double(cfg.global_batch_sequences()) * cfg.model.seq_len;
  std::string trace_events;
  double trace_offset_us = 0, total_ms = 0;
  int timed_steps = 0;
  while (trainer.step() < cfg.training.steps) {
    maybe_inject_failure(mpi.rank(), trainer.step() + 1);
    StepResult r = trainer.train_step();
    if (r.step > 1 || cfg.training.steps == 1) { total_ms += r.ms; ++timed_steps; }  // step 1 warms up
    if (!cfg.logging.trace.empty()) {
      trace_events += (trace_events.empty() ? "" : ",\n") +
                      chrome_trace_events(trainer.timeline(), mpi.rank(),
                                          cat("rank ", mpi.rank(), " (dp ", par.dp_rank, " pp ", par.pp_rank,
                                              " tp ", par.tp_rank, ")"),
                                          trace_offset_us);
      trace_offset_us += r.ms * 1000.0;
    }
    if (!args.dump_dir.empty() && par.dp_rank == 0)
      write_param_dump(cat(args.dump_dir, "/step", r.step, ".rank", mpi.rank(), ".bin"), r.loss, trainer.params());
    if (r.step % cfg.logging.every == 0 || r.step == cfg.training.steps || r.step == 1)
      metrics.step(r, cfg.training.steps, tokens_per_step, timed_steps ? total_ms / timed_steps : r.ms);
    const int ev = cfg.training.eval_every;
    if (ev > 0 && (r.step % ev == 0 || r.step == cfg.training.steps)) {
      double val = trainer.evaluate();
      if (!std::isnan(val)) metrics.eval(r.step, val);
    }
    checkpoints.after_step(trainer, r.step == cfg.training.steps);
  }
  if (!cfg.logging.trace.empty()) write_trace(cfg.logging.trace, trace_events, layout.world());
  if (cfg.logging.sample_tokens > 0 && cfg.model.vocab_size == 256) {
    std::string text = generate_sample(trainer, cfg.logging.sample_tokens);
    if (rank0 && !text.empty()) log::info("sample:\n", text);
  }
  return 0;
}

}  // namespace pptrain
