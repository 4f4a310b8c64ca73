// MpiSession: RAII for MPI_Init/MPI_Finalize, and the one way a fatal error ends the
// whole job (abort_job): print on this rank, then MPI_Abort so no other rank hangs.
#pragma once

namespace pptrain {

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
  int rank_ = 0;
  int world_ = 1;
};

}  // namespace pptrain
