// StagedMpiComm: the cuda backend's tensors moved over MPI through pinned host buffers,
// for groups NCCL cannot serve (parallel.comm: mpi, or auto where two ranks of a group share
// a GPU: NCCL refuses two ranks on one device). The same Communicator semantics as
// NcclComm, so the executor, the tensor-parallel layers and ZeRO-1's buckets run unchanged:
//
//   device -> host: the copy stream waits for the compute stream's work so far (an event)
//     and copies into a pinned buffer. A non-blocking operation (isend, ireduce_scatter,
//     iallgather) returns at once and is held back in this communicator's queue until that
//     copy is seen done, then posted: by progress(), which every call and every request's
//     test() and wait() make first. So the host goes on issuing work, as on NCCL's path,
//     instead of waiting for the device before each send.
//   host: MPI does the transfer or collective on a duplicate of the group's communicator
//     (the held-back collectives are posted later than the host reached them, so other
//     users of the group, the trainer's host reductions, must not share their order).
//   host -> device: once MPI is done (wait(), or test() true), the copy stream copies the
//     result back after the compute stream's work queued before the request was posted, and
//     the compute stream waits for that copy (an event): no host wait.
//
// Posting in order: each queue posts first come first, so every rank starts the group's
// collectives and its sends to one peer in the order it issued them (MPI's rules). No rank
// may wait in MPI while an operation a peer needs sits in a queue, so the blocking calls and
// every request's wait() first post what every StagedMpiComm of the process holds, waiting
// for the device copies in order (they depend only on work already issued, so they end).
//
// Pinned buffers are pooled by size and handed out again only once the copy that read them
// has finished. Host-memory entry points (allreduce of doubles, broadcast, barrier) post
// what is held, then go to MPI directly. Collective over the group, like NcclComm.
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_handles.h"
#include "core/communicator.h"
#include "parallel/mpi_comm.h"

namespace pptrain {

// A page-locked host buffer (cudaMallocHost), owned.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class StagedMpiComm final : public Communicator {
 public:
  // Collective over `group` (it duplicates its communicator); `compute_stream` is the
  // stream of the CudaOps whose tensors it moves.
  StagedMpiComm(MpiComm& group, cudaStream_t compute_stream);
  ~StagedMpiComm() override;
  StagedMpiComm(const StagedMpiComm&) = delete;
  StagedMpiComm& operator=(const StagedMpiComm&) = delete;

  int rank() const override { return own_.rank(); }
  int size() const override { return own_.size(); }
  void allreduce(float* data, size_t n, ReduceOp op) override;     // device data[n], in place
  void allreduce(double* data, size_t n, ReduceOp op) override;    // host data[n], in place
  void allreduce(bfloat16* data, size_t n, ReduceOp op) override;  // device data[n], in place
  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override;  // device
  void allgather(float* data, size_t count) override;                                       // device
  void allgather(bfloat16* data, size_t count) override;                                    // device
  void broadcast(void* data, size_t bytes, int root) override;  // host data[bytes]
  void barrier() override;
  std::unique_ptr<Request> ireduce_scatter(float* data, size_t count, ReduceOp op) override;  // device
  std::unique_ptr<Request> iallgather(float* data, size_t count) override;                    // device
  std::unique_ptr<Request> iallgather(bfloat16* data, size_t count) override;                 // device
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override;  // device
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override;        // device
  // Posts what every StagedMpiComm of this process holds back: the operations whose copy is
  // done (`all`: every one, the host waiting for the copies in order).
  void progress(bool all) override;

  // For StagedRequest (staged_comm.cpp): the copies, the queue and the pool.
  struct Staging;  // a pinned buffer lent to one operation, and where its result goes
  struct Slot;     // a held-back operation's MPI request, once posted
  // D2H into a lent buffer, after the compute stream's work so far; `wait`: the host waits
  // for the copy (blocking calls), else the returned staging's `out` event marks it.
  std::shared_ptr<Staging> stage_out(const void* device, size_t bytes, bool wait);
  std::shared_ptr<Staging> lend(size_t bytes);  // no copy
  // H2D of `bytes` from the staging's buffer at `offset` to `device`, after the compute
  // stream's work up to `after` (null: up to now); the compute stream then waits for it.
  void stage_in(Staging& s, void* device, size_t offset, size_t bytes, cudaEvent_t after);
  void give_back(std::shared_ptr<Staging> s);  // returns the buffer once its copy is done

 private:
  // The MPI operation of a non-blocking call, on the host copy of its data.
  using PostOnHost = std::function<std::unique_ptr<Request>(char* host)>;
  // What the non-blocking calls share: data[bytes] copied to a pinned buffer, `post` queued
  // behind what this communicator holds and posted once that copy is done, and, where `dst`
  // is given, `back` bytes of the buffer from `offset` copied to it when MPI is done.
  std::unique_ptr<Request> post_when_copied(const void* data, size_t bytes, PostOnHost post, void* dst, size_t offset,
                                            size_t back);
  void post_held(bool all);  // this communicator's queue only
  std::unique_ptr<PinnedBuffer> take_buffer(size_t bytes);
  void reclaim(bool wait_all);

  MpiComm own_;  // a duplicate of the group's communicator: the transfers' own order
  cudaStream_t compute_;
  cuda::Stream copy_;
  std::multimap<size_t, std::unique_ptr<PinnedBuffer>> free_;  // by size
  struct Retiring {
    std::unique_ptr<PinnedBuffer> buffer;
    std::unique_ptr<cuda::Event> copied;  // the H2D that reads it
  };
  std::deque<Retiring> retiring_;
  struct Held {
    std::shared_ptr<Staging> staging;  // its `out` event: the copy the post waits for
    PostOnHost post;
    std::shared_ptr<Slot> slot;
  };
  std::deque<Held> held_;  // first come, first posted
};

}  // namespace pptrain
