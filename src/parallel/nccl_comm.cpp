#include "parallel/nccl_comm.h"

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "parallel/nccl.h"

namespace pptrain {
namespace {

// A posted ncclSend/ncclRecv or collective: complete when `done` (recorded on its stream)
// is. wait() blocks the host on it (a send), or with `then` given orders that stream after
// it without blocking the host (a receive or a collective: the compute stream).
class NcclRequest final : public Request {
 public:
  explicit NcclRequest(std::unique_ptr<cuda::Event> done, cudaStream_t then = nullptr)
      : done_(std::move(done)), then_(then) {}
  void wait() override {
    if (then_) PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(then_, done_->get(), 0));
    else PPTRAIN_CUDA_CHECK(cudaEventSynchronize(done_->get()));
  }
  bool test() override {
    cudaError_t err = cudaEventQuery(done_->get());
    if (err == cudaErrorNotReady) return false;
    PPTRAIN_CUDA_CHECK(err);
    return true;
  }
  bool on_device() const override { return then_ != nullptr; }

 private:
  std::unique_ptr<cuda::Event> done_;
  cudaStream_t then_;
};

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

}  // namespace

void NcclComm::check(ncclResult_t result, const char* call) const {
  if (result == ncclSuccess) return;
  fail(call, " failed on ", cuda::where(), " in group ", group_.where(), ": ", ncclGetErrorString(result));
}

NcclComm::NcclComm(MpiComm& group, cudaStream_t compute_stream) : group_(group), compute_(compute_stream) {
  ncclUniqueId id{};
  if (group_.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  group_.broadcast(&id, sizeof id, 0);  // MPI bootstraps NCCL
  check(ncclCommInitRank(&comm_, group_.size(), id, group_.rank()), "ncclCommInitRank");
  PPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking));
  PPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&recv_stream_, cudaStreamNonBlocking));
  PPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&collective_stream_, cudaStreamNonBlocking));
}

NcclComm::~NcclComm() {
  // Let queued transfers finish before the communicator and its streams go.
  if (send_stream_) (void)cudaStreamSynchronize(send_stream_);
  if (recv_stream_) (void)cudaStreamSynchronize(recv_stream_);
  if (collective_stream_) (void)cudaStreamSynchronize(collective_stream_);
  if (comm_) (void)ncclCommDestroy(comm_);
  if (send_stream_) (void)cudaStreamDestroy(send_stream_);
  if (recv_stream_) (void)cudaStreamDestroy(recv_stream_);
  if (collective_stream_) (void)cudaStreamDestroy(collective_stream_);
}

void NcclComm::allreduce(float* data, size_t n, ReduceOp op) {
  if (n == 0 || size() == 1) return;
  check(ncclAllReduce(data, data, n, ncclFloat, to_nccl(op), comm_, compute_), "ncclAllReduce");
}

void NcclComm::allreduce(bfloat16* data, size_t n, ReduceOp op) {
  if (n == 0 || size() == 1) return;
  check(ncclAllReduce(data, data, n, ncclBfloat16, to_nccl(op), comm_, compute_), "ncclAllReduce");
}

void NcclComm::reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) {
  if (count == 0) return;
  check(ncclReduceScatter(send, recv, count, ncclFloat, to_nccl(op), comm_, compute_), "ncclReduceScatter");
}

void NcclComm::allgather(float* data, size_t count) {
  if (count == 0 || size() == 1) return;
  check(ncclAllGather(data + size_t(rank()) * count, data, count, ncclFloat, comm_, compute_), "ncclAllGather");
}

void NcclComm::allgather(bfloat16* data, size_t count) {
  if (count == 0 || size() == 1) return;
  check(ncclAllGather(data + size_t(rank()) * count, data, count, ncclBfloat16, comm_, compute_), "ncclAllGather");
}

template <typename Issue>
std::unique_ptr<Request> NcclComm::start_collective(Issue issue) {
  PPTRAIN_CUDA_CHECK(cudaEventRecord(compute_ready_.get(), compute_));
  PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(collective_stream_, compute_ready_.get(), 0));
  issue(collective_stream_);
  auto done = std::make_unique<cuda::Event>();
  PPTRAIN_CUDA_CHECK(cudaEventRecord(done->get(), collective_stream_));
  return std::make_unique<NcclRequest>(std::move(done), compute_);
}

std::unique_ptr<Request> NcclComm::ireduce_scatter(float* data, size_t count, ReduceOp op) {
  if (count == 0 || size() == 1) return Communicator::ireduce_scatter(data, count, op);
  return start_collective([&](cudaStream_t stream) {
    check(ncclReduceScatter(data, data + size_t(rank()) * count, count, ncclFloat, to_nccl(op), comm_, stream),
          "ncclReduceScatter");
  });
}

std::unique_ptr<Request> NcclComm::iallgather(float* data, size_t count) {
  if (count == 0 || size() == 1) return Communicator::iallgather(data, count);
  return start_collective([&](cudaStream_t stream) {
    check(ncclAllGather(data + size_t(rank()) * count, data, count, ncclFloat, comm_, stream), "ncclAllGather");
  });
}

std::unique_ptr<Request> NcclComm::iallgather(bfloat16* data, size_t count) {
  if (count == 0 || size() == 1) return Communicator::iallgather(data, count);
  return start_collective([&](cudaStream_t stream) {
    check(ncclAllGather(data + size_t(rank()) * count, data, count, ncclBfloat16, comm_, stream), "ncclAllGather");
  });
}

void NcclComm::allreduce(double* data, size_t n, ReduceOp op) {
  PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute_));
  group_.allreduce(data, n, op);
}

void NcclComm::broadcast(void* data, size_t bytes, int root) {
  PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute_));
  group_.broadcast(data, bytes, root);
}

void NcclComm::barrier() {
  PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute_));
  group_.barrier();
}

std::unique_ptr<Request> NcclComm::post(void* data, size_t bytes, int peer, bool is_send) {
  if (peer < 0 || peer >= size() || peer == rank())
    fail(is_send ? "isend" : "irecv", " on ", group_.where(), ": peer ", peer, " is not another rank of the group");
  cudaStream_t stream = is_send ? send_stream_ : recv_stream_;
  // The transfer starts once the compute stream has produced (send) or released (recv)
  // the buffer.
  PPTRAIN_CUDA_CHECK(cudaEventRecord(compute_ready_.get(), compute_));
  PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_ready_.get(), 0));
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t result = is_send ? ncclSend(data, bytes, ncclUint8, peer, comm_, stream)
                                : ncclRecv(data, bytes, ncclUint8, peer, comm_, stream);
  ncclResult_t end = ncclGroupEnd();
  check(result, is_send ? "ncclSend" : "ncclRecv");
  check(end, "ncclGroupEnd");
  auto done = std::make_unique<cuda::Event>();
  PPTRAIN_CUDA_CHECK(cudaEventRecord(done->get(), stream));
  // A received tensor is read by the compute stream's next kernels: waiting for it there,
  // not on the host, keeps the host issuing work ahead of the device (a host wait per
  // received microbatch would leave the GPU idle for the wake-up and the next launches).
  // A send's buffer is released by the host (the executor's poll), so the host waits.
  return std::make_unique<NcclRequest>(std::move(done), is_send ? nullptr : compute_);
}

std::unique_ptr<Request> NcclComm::isend(const void* data, size_t bytes, int peer, int tag) {
  return post(const_cast<void*>(data), bytes, peer, true);
}
std::unique_ptr<Request> NcclComm::irecv(void* data, size_t bytes, int peer, int tag) {
  return post(data, bytes, peer, false);
}

std::unique_ptr<Communicator> make_nccl_comm(MpiComm& group, Ops& ops) {
  auto* cuda_ops = dynamic_cast<cuda::CudaOps*>(&ops);
  if (!cuda_ops) fail("NCCL needs the cuda backend, got backend '", ops.name(), "'");
  return std::make_unique<NcclComm>(group, cuda_ops->compute_stream());
}

}  // namespace pptrain
