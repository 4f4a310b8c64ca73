// pptrain: the CLI entry. Dispatches to cli/ subcommands; turns a pptrain::Error on any
// rank into one printed line and a non-zero exit of the whole job.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "backend/cpu/blas_setup.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/mpi_session.h"
#include "train/stop_signals.h"

namespace {
const char* kUsage =
    "usage: pptrain <command> [args]\n"
    "  prepare-data --text FILE...|--markov --out DIR   write token shards (see prepare-data --help)\n"
    "  train CONFIG [section.key=value ...] [--dump DIR [--step-from REF]] [--dry-run]\n"
    "                                         train (mpirun/srun -np dp*pp*tp for parallel runs);\n"
    "                                         --dry-run: print each rank's predicted memory, exit\n"
    "  profile CONFIG [--out FILE] [--repeats N] [section.key=value ...]\n"
    "                                         time the config's layers (F, I, W), transfers and\n"
    "                                         all-reduces; write the cost file (default profile.json)\n"
    "  plan CONFIG --ranks N [--memory-per-rank GiB] [--profile FILE] [--out BEST.yaml]\n"
    "                                         rank the layouts of N ranks by predicted step time\n"
    "  schedule --schedule NAME --pp P --microbatches M   show, check and simulate a schedule\n"
    "  inspect [--verify] FILE.h5|DIR         attributes, config and tensors of a checkpoint\n"
    "  import-llmc MODEL.bin OUT.h5           convert an llm.c GPT-2 model file to a checkpoint\n"
    "  import-hf DIR OUT.h5                   convert a Hugging Face GPT-2 or Llama (config.json + safetensors)\n"
    "  export-hf CKPT.h5 DIR [--dtype fp32|bf16] [--max-shard-bytes N]\n"
    "                                         write a checkpoint as a Hugging Face model directory\n"
    "  --version                              version and compiled-in backends\n"
    "train exits 0 when done, 75 when SIGTERM/SIGINT/SIGUSR1 stopped it after a step and it saved a\n"
    "checkpoint (resume with checkpoint.resume: auto), 1 on an error (a non-finite loss included) or\n"
    "when runtime.watchdog_s passed without progress.\n";
}

int main(int argc, char** argv) {
  // Before MPI starts: may re-execute this process with OPENBLAS_CORETYPE set.
  pptrain::cpu::ensure_blas_core(argv);
  // A training run's stop signals count from here, not from when the loop starts: a
  // SIGTERM during start-up (MPI, config, preflight, model build) stops after one step.
  std::optional<pptrain::StopSignals> stop_signals;
  if (argc >= 2 && std::string(argv[1]) == "train") stop_signals.emplace();
  pptrain::MpiSession mpi(&argc, &argv);
  if (argc < 2) {
    if (mpi.rank() == 0) std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  pptrain::Args args(argv + 2, argv + argc);
  try {
    if (cmd == "train") return pptrain::cmd_train(args, mpi);
    if (cmd == "profile") return pptrain::cmd_profile(args, mpi);
    if (cmd == "--version" || cmd == "version") return pptrain::cmd_version(args);
    if (cmd == "prepare-data") return pptrain::cmd_prepare_data(args);
    if (cmd == "schedule") return pptrain::cmd_schedule(args);
    if (cmd == "plan") return pptrain::cmd_plan(args, mpi);
    if (cmd == "inspect") return pptrain::cmd_inspect(args);
    if (cmd == "import-llmc") return pptrain::cmd_import_llmc(args);
    if (cmd == "import-hf") return pptrain::cmd_import_hf(args);
    if (cmd == "export-hf") return pptrain::cmd_export_hf(args);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      if (mpi.rank() == 0) std::fputs(kUsage, stdout);
      return 0;
    }
    pptrain::fail("unknown command '", cmd, "' (see pptrain --help)");
  } catch (const pptrain::Error& e) {
    pptrain::log::error(e.what());
    mpi.abort_job(1);
  } catch (const std::exception& e) {
    pptrain::log::error("internal error: ", e.what());
    mpi.abort_job(3);
  }
}
