// pptrain train CONFIG [section.key=value ...] [--dump DIR]
// Parse, check up front (job/preflight.h: data, output paths, memory), assemble the job,
// run the training loop. Every rank parses the config, runs the checks and builds its part
// of the job; world rank 0 prints.
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/faults.h"
#include "job/job.h"
#include "job/preflight.h"
#include "parallel/mpi_session.h"
#include "pipeline/registry.h"
#include "train/run_training.h"

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

}  // namespace

int cmd_train(const Args& raw_args, MpiSession& mpi) {
  const TrainArgs args = parse_args(raw_args);
  // Planted faults (tests of the tests): parsed once, announced, handed to where they act.
  const Faults all_faults = Faults::from_env();
  const Config cfg = load_config(args.config, args.overrides);
  all_faults.announce(mpi.rank());
  // Everything the config and the file system can tell up front (data, output paths,
  // memory) is checked before the Job allocates the model.
  {
    MpiComm world = checked_world(cfg);
    run_preflight(cfg, pipeline::prepare_schedule(cfg), world);
  }
  Job job(cfg, all_faults.on_rank(mpi.rank()));
  TrainingHooks hooks;
  hooks.dump_dir = args.dump_dir;
  return run_training(job, hooks);
}

}  // namespace pptrain
