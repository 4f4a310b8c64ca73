// NcclComm: the Communicator over NCCL for `device: cuda` (built with the cuda backend only;
// parallel/nccl.h is the CUDA-free way in). In the emulated build
// (PPTRAIN_EMULATED: tests and pptrain-emu) the same code runs over the emulated NCCL of
// emu/nccl_emu.h, which carries the calls on MPI.
//
// One ncclComm_t per group, bootstrapped over the matching MPI communicator: group rank 0
// creates the ncclUniqueId and broadcasts it with MPI, then every member calls
// ncclCommInitRank. Which memory each call takes:
//  - allreduce(float*), allreduce(bfloat16*): device memory, on the compute stream, so it is ordered with the
//    kernels that produce and consume the tensor (TP activations, DP/embedding gradients).
//  - allreduce(double*), broadcast, barrier: host memory (losses, norms, checkpoint
//    metadata), carried by the MPI group; allreduce(double*) first waits for the compute
//    stream so a value computed there is final.
//  - isend/irecv: device memory, on two communication streams (one for sends, one for
//    receives, so a send and a receive between the same two ranks never wait for each
//    other), each ncclSend/ncclRecv inside ncclGroupStart/End. The comm stream first waits
//    for the compute stream (an event), so a send reads the finished activation and a
//    receive does not overwrite a buffer still in use. Request::wait() blocks the host on
//    the transfer's event (as MPI_Wait does), so afterwards received data is in place and
//    a sent buffer may be reused; Request::test() polls the event. Compute keeps running
//    while transfers are in flight.
//  - ireduce_scatter/iallgather: device memory, on a third stream (collectives), after
//    the compute stream's work so far (an event). Request::wait() makes the compute stream
//    wait for the collective (cudaStreamWaitEvent) without blocking the host: the kernels
//    launched after it see the result. ZeRO-1's buckets overlap the pipeline this way.
//    The blocking collectives stay on the compute stream; the trainer waits for every
//    pending collective of a group before it calls a blocking one there, so the group's
//    operations run in the order every rank issued them.
// NCCL matches point-to-point messages by order per pair of ranks, not by tag: both sides
// must post a pair's messages in the same order. Tags are accepted and ignored.
#pragma once
#include <memory>

#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/nccl_api.h"
#include "core/communicator.h"
#include "parallel/mpi_comm.h"

namespace pptrain {

class NcclComm final : public Communicator {
 public:
  // Collective over `group` (which must outlive this object). `compute_stream` is the
  // stream of the CudaOps whose tensors this communicator moves.
  NcclComm(MpiComm& group, cudaStream_t compute_stream);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void allreduce(float* data, size_t n, ReduceOp op) override;   // device data[n], in place
  void allreduce(double* data, size_t n, ReduceOp op) override;  // host data[n], in place
  void allreduce(bfloat16* data, size_t n, ReduceOp op) override;  // device data[n], in place
  // Device data on the compute stream, like allreduce(float*): send[size · count] ->
  // recv[count] (ncclReduceScatter; in place when recv = send + rank · count), and the
  // in-place all-gather of data[size · count] (ncclAllGather).
  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override;
  void allgather(float* data, size_t count) override;
  void allgather(bfloat16* data, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;   // host data[bytes]
  void barrier() override;
  std::unique_ptr<Request> ireduce_scatter(float* data, size_t count, ReduceOp op) override;  // device
  std::unique_ptr<Request> iallgather(float* data, size_t count) override;                    // device
  std::unique_ptr<Request> iallgather(bfloat16* data, size_t count) override;                 // device
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override;  // device
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override;        // device

 private:
  std::unique_ptr<Request> post(void* data, size_t bytes, int peer, bool is_send);
  // Runs `issue(stream)` on the collective stream after the compute stream's work so far.
  template <typename Issue>
  std::unique_ptr<Request> start_collective(Issue issue);
  void check(ncclResult_t result, const char* call) const;

  MpiComm& group_;
  cudaStream_t compute_;
  cudaStream_t send_stream_ = nullptr, recv_stream_ = nullptr, collective_stream_ = nullptr;
  cuda::Event compute_ready_;  // recorded on the compute stream before each p2p or collective
  ncclComm_t comm_ = nullptr;
};

}  // namespace pptrain
