// StagedMpiComm: the cuda backend's tensors moved over MPI through pinned host buffers,
// for groups NCCL cannot serve (parallel.comm: mpi, or auto where two ranks of a group share
// a GPU: NCCL refuses two ranks on one device). The same Communicator semantics as
// NcclComm, so the executor, the tensor-parallel layers and ZeRO-1's buckets run unchanged:
//
//   device -> host: the copy stream waits for the compute stream's work so far (an event),
//     copies into a pinned buffer, and the host waits for that copy (the data must be on
//     the host before MPI can send it: the one host wait NCCL's path does not have);
//   host: the MpiComm of the group does the transfer or collective (non-blocking ones stay
//     non-blocking: MPI moves the data while the pipeline goes on);
//   host -> device: once MPI is done (wait(), or test() true), the copy stream copies the
//     result back after the compute stream's work queued before the request was posted, and
//     the compute stream waits for that copy (an event): no host wait.
//
// Pinned buffers are pooled by size and handed out again only once the copy that read them
// has finished. Host-memory entry points (allreduce of doubles, broadcast, barrier) go to
// the MpiComm directly. Collective over the group, like NcclComm.
#pragma once
#include <deque>
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
  // `group` must outlive this object; `compute_stream` is the stream of the CudaOps whose
  // tensors it moves.
  StagedMpiComm(MpiComm& group, cudaStream_t compute_stream);
  ~StagedMpiComm() override;
  StagedMpiComm(const StagedMpiComm&) = delete;
  StagedMpiComm& operator=(const StagedMpiComm&) = delete;

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
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

  // For StagedRequest (staged_comm.cpp): the copies and the pool.
  struct Staging;  // a pinned buffer lent to one operation, and where its result goes
  std::shared_ptr<Staging> stage_out(const void* device, size_t bytes);  // D2H, host waits
  std::shared_ptr<Staging> lend(size_t bytes);                           // no copy
  // H2D of `bytes` from the staging's buffer at `offset` to `device`, after the compute
  // stream's work up to `after` (null: up to now); the compute stream then waits for it.
  void stage_in(Staging& s, void* device, size_t offset, size_t bytes, cudaEvent_t after);
  void give_back(std::shared_ptr<Staging> s);  // returns the buffer once its copy is done

 private:
  std::unique_ptr<PinnedBuffer> take_buffer(size_t bytes);
  void reclaim(bool wait_all);

  MpiComm& group_;
  cudaStream_t compute_;
  cuda::Stream copy_;
  std::multimap<size_t, std::unique_ptr<PinnedBuffer>> free_;  // by size
  struct Retiring {
    std::unique_ptr<PinnedBuffer> buffer;
    std::unique_ptr<cuda::Event> copied;  // the H2D that reads it
  };
  std::deque<Retiring> retiring_;
};

}  // namespace pptrain
