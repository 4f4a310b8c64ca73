// MpiComm: the Communicator over an MPI communicator (CPU runs; on GPUs it bootstraps
// NCCL). Every MPI call's return code is checked: a failure becomes a pptrain::Error
// naming the call, the group ("world", "pp", "tp", "dp", "embedding") and the rank.
// MPI counts are ints, so transfers of more than max_count elements (bytes for
// point-to-point) are split into several calls (max_count = INT_MAX unless lowered, e.g.
// by tests). allgather/iallgather, for a few scalars per rank, are never split.
#pragma once
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace pptrain {

// How a rank waits for MPI when it has nothing else to do (the wait() of MpiComm's
// requests and gathers). Poll: MPI_Test flat out, the lowest latency, right for a rank
// with a CPU to itself. Sleep: for ranks that share their CPUs with more threads than the
// CPUs hold (several ranks on a laptop or a CI runner, `mpirun --oversubscribe`): a rank
// that polls there takes the CPU from the rank whose data it waits for. A sleeping wait
// polls flat out for its first 50 µs (a message on its way lands within them), then
// sleeps between polls, 20 µs doubling to at most 1 ms. Process-wide: MpiSession sets it
// once at start-up from the node's ranks and CPUs (PPTRAIN_MPI_WAIT=poll|sleep decides
// instead); Poll until then.
enum class MpiWait { Poll, Sleep };
void set_mpi_wait(MpiWait wait);
MpiWait mpi_wait();

// A pending MPI_Iallgather of doubles (MpiComm::iallgather). It owns both buffers, which
// MPI reads and writes until the gather completes, so nothing can free them early.
class PendingAllgather {
 public:
  PendingAllgather(const PendingAllgather&) = delete;
  PendingAllgather& operator=(const PendingAllgather&) = delete;
  // Still pending (an error unwinding the stack): MPI can neither cancel nor free a
  // non-blocking collective, and it may still write into the buffers, so they are leaked
  // on purpose and a warning says so; the process is ending with an error anyway.
  ~PendingAllgather();

  bool test();  // true once complete; drives MPI's progress
  // Polls test() until complete (MpiRequest::wait says why it polls) and returns every
  // rank's values: [size · n], rank r's n values at [r · n, (r + 1) · n).
  const std::vector<double>& wait();

 private:
  friend class MpiComm;
  PendingAllgather(std::vector<double> mine, int size, std::string where);
  std::vector<double> mine_;  // [n]
  std::vector<double> all_;   // [size · n]
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::string where_;         // "MPI_Iallgather of 6 doubles on 'world' (rank 1 of 4, ...)"
  bool done_ = false;
};

class MpiComm final : public Communicator {
 public:
  // MPI_COMM_WORLD, named "world"; never freed by MpiComm. MPI must be initialised.
  static MpiComm world();

  // Wraps `comm`; when `owned`, MPI_Comm_free runs in the destructor.
  MpiComm(MPI_Comm comm, std::string name, bool owned);
  ~MpiComm() override;
  MpiComm(MpiComm&& other) noexcept;
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  // MPI_Comm_split: ranks passing the same color form one group, ordered by key.
  // Collective over this communicator. The result is owned and named `name`.
  MpiComm split(int color, int key, const std::string& name) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const { return name_; }
  MPI_Comm handle() const { return comm_; }
  // World rank of the member with rank `group_rank` in this communicator.
  int world_rank_of(int group_rank) const;

  void allreduce(float* data, size_t n, ReduceOp op) override;   // data: [n], in place
  void allreduce(double* data, size_t n, ReduceOp op) override;  // data: [n], in place
  // MPI has no bf16 type: the values are widened to fp32, reduced, and rounded once.
  void allreduce(bfloat16* data, size_t n, ReduceOp op) override;
  // send: [size · count], recv: [count] (MPI_Reduce_scatter_block; in place through a
  // host copy of the received part, since MPI's in-place form writes at the front).
  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override;
  // data: [size · count], in place (MPI_Allgather with MPI_IN_PLACE; bf16 as 16-bit words).
  void allgather(float* data, size_t count) override;
  void allgather(bfloat16* data, size_t count) override;
  // Non-blocking (MPI_Ireduce_scatter_block, MPI_Iallgather): MPI moves the data while the
  // caller polls its requests (a pipeline step polls its transfers between actions).
  std::unique_ptr<Request> ireduce_scatter(float* data, size_t count, ReduceOp op) override;
  std::unique_ptr<Request> iallgather(float* data, size_t count) override;
  std::unique_ptr<Request> iallgather(bfloat16* data, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;   // data: [bytes]
  void barrier() override;
  // data: [bytes]; must stay valid until the request completes. Messages between one
  // pair of ranks with the same tag arrive in the order they were sent (MPI ordering).
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override;

  // Every rank's `mine` ([n], the same n on every rank), in rank order: [size · n]. The
  // result is the same bits on every rank, so a sum folded from it in rank order is too,
  // whatever algorithm MPI uses. Collective; the blocking form is iallgather's wait.
  std::vector<double> allgather(std::vector<double> mine);
  // The same, started and returned at once. As for every collective, all ranks call the
  // collectives of this communicator, blocking or not, in the same order (MPI's rule).
  std::unique_ptr<PendingAllgather> iallgather(std::vector<double> mine);

  // Largest element count per MPI call; larger transfers are chunked. Both sides of a
  // point-to-point transfer must use the same value.
  void set_max_count(size_t max_count);
  size_t max_count() const { return max_count_; }

  // Largest tag isend/irecv accept (MPI_TAG_UB, at least 32767).
  int max_tag() const { return max_tag_; }

  // "'pp' (rank 1 of 4, world rank 5)": how messages name this communicator and caller.
  std::string where() const;

 private:
  template <typename T>
  void allreduce_impl(T* data, size_t n, MPI_Datatype type, ReduceOp op);
  void allgather_impl(void* data, size_t count, MPI_Datatype type);
  std::unique_ptr<Request> iallgather_impl(void* data, size_t count, MPI_Datatype type, const char* what);
  // Throws unless count elements fit one MPI call (reduce-scatter and all-gather are not
  // split: their parts interleave over the ranks).
  void check_collective_count(size_t count, const char* call) const;
  std::unique_ptr<Request> post(char* data, size_t bytes, int peer, int tag, bool is_send);
  // Throws unless 0 <= peer < size(); `role` names it in the message ("peer", "root").
  void check_peer(int peer, const char* call, const char* role = "peer") const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;  // for messages
  int max_tag_ = 32767;
  size_t max_count_ = INT_MAX;
};

// Throws pptrain::Error "<call> failed on <where>: <MPI error string>" unless rc is
// MPI_SUCCESS.
void check_mpi(int rc, const char* call, const std::string& where);

}  // namespace pptrain
