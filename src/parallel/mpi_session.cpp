#include "parallel/mpi_session.h"

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_topology.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/mpi_comm.h"

namespace pptrain {

int threads_for_share(int cpus, int sharing) { return std::max(1, cpus / std::max(1, sharing)); }

std::vector<uint64_t> cpu_words(const std::vector<int>& cpus, int words) {
  std::vector<uint64_t> mask(size_t(std::max(words, 0)), 0);
  for (int cpu : cpus)
    if (cpu >= 0 && size_t(cpu / 64) < mask.size()) mask[size_t(cpu / 64)] |= uint64_t(1) << (cpu % 64);
  return mask;
}

int ranks_sharing(const std::vector<uint64_t>& mine, const std::vector<uint64_t>& masks) {
  const size_t words = mine.size();
  if (words == 0) return 0;
  int sharing = 0;
  for (size_t at = 0; at + words <= masks.size(); at += words) {
    bool overlap = false;
    for (size_t w = 0; w < words; ++w) overlap = overlap || (mine[w] & masks[at + w]) != 0;
    sharing += overlap;
  }
  return sharing;
}

namespace {

// Whether a launcher (mpirun/mpiexec, srun with PMI/PMIx) started this process: each sets
// these for its ranks. Without one, MPI_Init makes a singleton. Any srun step counts
// (SLURM_STEP_ID): an MPI built against Slurm's PMI-1 library gets its rank under plain
// srun with no PMI variable set, and such a rank must keep its MPI's own network choice.
bool started_by_a_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", "PMI_RANK", "PMI_SIZE",
                           "MPI_LOCALNRANKS", "SLURM_STEP_ID"})
    if (std::getenv(name)) return true;
  return false;
}

// How many of this node's ranks share a CPU with `ids` (this rank's affinity mask; itself
// included), 0 where that cannot be told (no mask here, or MPI failed). Collective over the
// world: every rank takes part in the split and the collectives, even one without a mask
// (an early return there would leave the others waiting in them); its empty mask overlaps
// no other.
int node_ranks_sharing(const std::vector<int>& ids) {
  MPI_Comm node = MPI_COMM_NULL;  // the ranks of this node: a shared-memory split of the world
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return 0;
  int local = 1;
  MPI_Comm_size(node, &local);
  // Each mask as 64-bit words, as many on every rank as the node's highest CPU needs.
  int words = ids.empty() ? 1 : ids.back() / 64 + 1;
  const int agreed = MPI_Allreduce(MPI_IN_PLACE, &words, 1, MPI_INT, MPI_MAX, node);
  const std::vector<uint64_t> mine = cpu_words(ids, words);
  std::vector<uint64_t> masks(size_t(local) * size_t(words));  // [local · words]
  const int gathered = agreed != MPI_SUCCESS
                           ? agreed
                           : MPI_Allgather(mine.data(), words, MPI_UINT64_T, masks.data(), words, MPI_UINT64_T, node);
  MPI_Comm_free(&node);
  return gathered != MPI_SUCCESS || ids.empty() ? 0 : ranks_sharing(mine, masks);
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  // An Open MPI 4 singleton (no launcher) forks and executes a daemon (orted) from MPI_Init,
  // which it needs only to start processes later (MPI_Comm_spawn); pptrain never does, so
  // it asks for the isolated singleton, which starts none: 0.1 s of every start-up of one
  // process (`pptrain --version` 0.39 -> 0.29 s, 2-core VM) and one process less to go
  // wrong. A user's own setting stands.
  //
  // Nor does a process alone need a network: Open MPI would open each of its point-to-point
  // layers to choose one, and the cm layer loads the Omni-Path library (libpsm2), whose
  // load-time constructor sleeps about 0.2 s (Debian's Open MPI 4.1, seen under gdb) on
  // every machine, with the hardware or without. ob1 over `self` is all a process without
  // peers uses. Launched ranks keep Open MPI's own choice (UCX or PSM2 between nodes).
  // `pptrain --version`: 0.23 -> 0.03 s (2-core VM).
  if (!started_by_a_launcher()) {
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
    setenv("OMPI_MCA_pml", "ob1", /*overwrite=*/0);
  }
  // Where the daemon is started all the same (the user's setting, another MPI), it gets
  // this process's environment. A library preloaded into pptrain (a profiler's injection
  // library: CUPTI activity tracers, nsys) would be loaded into that daemon too, where it
  // has no CUDA process to attach to and can keep the daemon from starting, leaving pptrain
  // waiting in MPI_Init. The preload is already in this process, so it is held back from
  // the daemon only: unset around MPI_Init (still single-threaded here), then restored.
  std::string preload;
  const bool hold_back = !started_by_a_launcher() && std::getenv("LD_PRELOAD");
  if (hold_back) {
    preload = std::getenv("LD_PRELOAD");
    unsetenv("LD_PRELOAD");
  }
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (hold_back) setenv("LD_PRELOAD", preload.c_str(), 1);
  // Errors on any communicator return codes instead of aborting silently, so the
  // Communicator can name the failed call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  log::set_rank(rank_, world_);
  share_cpus();
}

void MpiSession::share_cpus() {
  const char* set = std::getenv("OMP_NUM_THREADS");
  const bool user_set = set && *set;
  // Threads are counted in cores, not logical CPUs: SMT siblings share their core's FMA
  // units, and a step is nearly all matrix products, which a second thread on a core does
  // not speed up (OpenBLAS's and MKL's guidance; PyTorch's default is one thread per
  // physical core too). Without SMT, cores = CPUs and nothing changes.
  const cpu::CpuTopology& topology = cpu::process_topology();
  const bool smt = topology.cores > 0 && topology.cores < topology.cpus;
  if (world_ == 1) {  // one process: OpenMP's own default (every CPU it may use), one per core
    choose_mpi_wait(false);  // (it has nobody to wait for; a bad setting is still one line)
    if (smt && !user_set) {
      omp_set_num_threads(topology.cores);
      log::info(cat("threads: ", topology.cores, ", one per core (", topology.cpus, " CPUs are SMT siblings of ",
                    topology.cores, topology.cores == 1 ? " core" : " cores", "; OMP_NUM_THREADS unset)"));
    }
    return;
  }
  const std::vector<int>& ids = topology.ids;
  const int sharing = node_ranks_sharing(ids);
  if (sharing == 0) {  // unknown: OpenMP's default, and polling
    choose_mpi_wait(false);
    return;
  }
  const int cpus = int(ids.size());
  const int cores = smt ? topology.cores : cpus;
  const std::string siblings = smt ? cat(" (SMT siblings of ", cores, cores == 1 ? " core)" : " cores)") : "";
  const std::string shared = cat(cpus, cpus == 1 ? " CPU" : " CPUs", siblings);
  const int threads = user_set ? omp_get_max_threads() : threads_for_share(cores, sharing);
  // More threads on these CPUs than they hold: a rank waiting for MPI would poll on a CPU
  // another rank's thread needs (mpi_comm.h: MpiWait).
  const std::string waits = choose_mpi_wait(sharing * threads > cpus);
  if (user_set) {
    // The user's choice stands; say when it oversubscribes (rank 0 speaks for the job).
    if (rank_ == 0 && sharing > 1 && threads * sharing > cpus)
      log::info(cat("threads: OMP_NUM_THREADS=", set, " on each of ", sharing, " ranks that share ", shared,
                    ": more threads than CPUs (each rank waits for the others' ",
                    "threads; unset it to let each rank take ", threads_for_share(cores, sharing), ")", waits));
    return;
  }
  omp_set_num_threads(threads);
  if (rank_ == 0 && sharing > 1)
    log::info(cat("threads: ", threads, " per rank (", sharing, " ranks of this node share ", shared,
                  "; OMP_NUM_THREADS unset)", waits));
  else if (rank_ == 0 && smt)
    log::info(cat("threads: ", threads, " per rank, one per core (its ", shared, "; OMP_NUM_THREADS unset)"));
}

std::string MpiSession::choose_mpi_wait(bool oversubscribed) {
  const char* asked = std::getenv("PPTRAIN_MPI_WAIT");
  const std::string choice = asked ? asked : "";
  if (choice == "poll" || choice == "sleep") {
    set_mpi_wait(choice == "poll" ? MpiWait::Poll : MpiWait::Sleep);
    return "";
  }
  if (!choice.empty()) {
    log::error(cat("PPTRAIN_MPI_WAIT=", choice, ": expected poll or sleep"));
    abort_job(2);
  }
  set_mpi_wait(oversubscribed ? MpiWait::Sleep : MpiWait::Poll);
  return oversubscribed ? "; a rank waiting for MPI sleeps between polls" : "";
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort_job(int code) const {
  // A short grace period lets the other ranks, which usually hit the same error, print
  // their own line before MPI_Abort kills them.
  if (world_ > 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  MPI_Finalize();
  std::exit(code);
}

}  // namespace pptrain
