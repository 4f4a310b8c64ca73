// MpiSession: RAII for MPI_Init/MPI_Finalize, and the one way a fatal error ends the
// whole job (abort_job): print on this rank, then MPI_Abort so no other rank hangs.
// It also gives each rank its share of the CPUs it runs on (share_cpus), before any
// OpenMP region or BLAS call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pptrain {

// How many OpenMP threads a rank takes when the user did not say (OMP_NUM_THREADS unset):
// the CPUs it may run on divided among the ranks of its node that may run on them too, at
// least one. `cpus`: CPUs in this rank's affinity mask, counted as cores where they are SMT
// siblings (backend/cpu/cpu_topology.h: a core's second thread adds no FMA units);
// `sharing`: local ranks (itself included) whose masks overlap it. Four ranks left unbound
// on two cores take one thread each (two each would put eight threads on two cores, and
// every rank's OpenMP barrier would wait for descheduled threads: about 9x slower a step,
// measured); ranks bound to a core each take one; one rank takes them all (one per core).
int threads_for_share(int cpus, int sharing);

// A mask of CPUs as `words` 64-bit words (CPU c: bit c % 64 of word c / 64; CPUs beyond
// them are left out), the form the ranks of a node exchange: any number of CPUs, where
// glibc's cpu_set_t holds 1,024.
std::vector<uint64_t> cpu_words(const std::vector<int>& cpus, int words);
// How many of the masks in `masks` ([n · words], words = mine.size()) share a CPU with
// `mine` (its own among them).
int ranks_sharing(const std::vector<uint64_t>& mine, const std::vector<uint64_t>& masks);

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  // Ends every rank of the job with `code` (after this rank printed its message).
  [[noreturn]] void abort_job(int code) const;

 private:
  // Sets this rank's OpenMP threads (threads_for_share; a job of one process: one per core
  // where its CPUs are SMT siblings, else OpenMP's default) unless OMP_NUM_THREADS is set,
  // in which case it only warns when the node's ranks ask for more threads than its CPUs.
  // Collective over MPI_COMM_WORLD (a shared-memory split and an all-gather of masks).
  void share_cpus();
  // Sets how this rank waits for MPI (mpi_comm.h: MpiWait): PPTRAIN_MPI_WAIT=poll|sleep
  // where given (anything else ends the job with one line), else Sleep when `oversubscribed`.
  // Returns what the threads line adds ("" or "; a rank waiting ... sleeps between polls").
  std::string choose_mpi_wait(bool oversubscribed);

  int rank_ = 0;
  int world_ = 1;
};

}  // namespace pptrain
