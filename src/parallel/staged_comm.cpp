// StagedMpiComm (staged_comm.h): MPI for the cuda backend's tensors through pinned host
// buffers.
#include "parallel/staged_comm.h"

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "parallel/nccl.h"

namespace pptrain {

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  PPTRAIN_CUDA_CHECK(cudaMallocHost(&data_, bytes ? bytes : 1));
}
PinnedBuffer::~PinnedBuffer() { (void)cudaFreeHost(data_); }

struct StagedMpiComm::Staging {
  std::unique_ptr<PinnedBuffer> buffer;
  std::unique_ptr<cuda::Event> copied;  // the H2D that reads the buffer, once issued
  char* host() const { return static_cast<char*>(buffer->data()); }
};

namespace {

// A non-blocking operation of StagedMpiComm: the MPI request on the pinned buffer, then
// (when it has a device destination) the copy back, issued by whichever of wait() and
// test() first sees MPI done. wait() orders the compute stream after that copy without
// blocking the host; test() is true once MPI is done and the copy is issued (the compute
// stream is ordered after it then).
class StagedRequest final : public Request {
 public:
  StagedRequest(StagedMpiComm& comm, std::shared_ptr<StagedMpiComm::Staging> staging, std::unique_ptr<Request> mpi,
                void* dst, size_t offset, size_t bytes, std::unique_ptr<cuda::Event> posted = nullptr)
      : comm_(comm), staging_(std::move(staging)), posted_(std::move(posted)), mpi_(std::move(mpi)), dst_(dst),
        offset_(offset), bytes_(bytes) {}
  void wait() override {
    if (landed_) return;
    mpi_->wait();
    land();
  }
  bool test() override {
    if (landed_) return true;
    if (!mpi_->test()) return false;
    land();
    return true;
  }

 private:
  void land() {
    if (dst_ && bytes_) comm_.stage_in(*staging_, dst_, offset_, bytes_, posted_ ? posted_->get() : nullptr);
    comm_.give_back(std::move(staging_));
    landed_ = true;
  }
  StagedMpiComm& comm_;
  std::shared_ptr<StagedMpiComm::Staging> staging_;  // before mpi_: destroyed after it
  std::unique_ptr<cuda::Event> posted_;             // irecv: the compute stream at the post
  std::unique_ptr<Request> mpi_;
  void* dst_;
  size_t offset_, bytes_;
  bool landed_ = false;
};

}  // namespace

StagedMpiComm::StagedMpiComm(MpiComm& group, cudaStream_t compute_stream) : group_(group), compute_(compute_stream) {}

StagedMpiComm::~StagedMpiComm() {
  (void)cudaStreamSynchronize(copy_.get());  // every copy from or into a pooled buffer
}

std::unique_ptr<PinnedBuffer> StagedMpiComm::take_buffer(size_t bytes) {
  reclaim(false);
  // The smallest free buffer that holds `bytes`, if it is not more than twice as large
  // (a few large buffers must not serve every small transfer).
  auto it = free_.lower_bound(bytes);
  if (it != free_.end() && it->first <= 2 * bytes + 4096) {
    std::unique_ptr<PinnedBuffer> b = std::move(it->second);
    free_.erase(it);
    return b;
  }
  return std::make_unique<PinnedBuffer>(bytes);
}

void StagedMpiComm::reclaim(bool wait_all) {
  while (!retiring_.empty()) {
    cudaEvent_t copied = retiring_.front().copied->get();
    if (wait_all) {
      PPTRAIN_CUDA_CHECK(cudaEventSynchronize(copied));
    } else {
      const cudaError_t err = cudaEventQuery(copied);
      if (err == cudaErrorNotReady) return;  // in order: later ones were issued later
      PPTRAIN_CUDA_CHECK(err);
    }
    std::unique_ptr<PinnedBuffer> b = std::move(retiring_.front().buffer);
    retiring_.pop_front();
    const size_t size = b->bytes();
    free_.emplace(size, std::move(b));
  }
}

std::shared_ptr<StagedMpiComm::Staging> StagedMpiComm::lend(size_t bytes) {
  auto s = std::make_shared<Staging>();
  s->buffer = take_buffer(bytes);
  return s;
}

std::shared_ptr<StagedMpiComm::Staging> StagedMpiComm::stage_out(const void* device, size_t bytes) {
  std::shared_ptr<Staging> s = lend(bytes);
  if (bytes == 0) return s;
  cuda::Event ready;
  PPTRAIN_CUDA_CHECK(cudaEventRecord(ready.get(), compute_));
  PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), ready.get(), 0));
  PPTRAIN_CUDA_CHECK(cudaMemcpyAsync(s->host(), device, bytes, cudaMemcpyDeviceToHost, copy_.get()));
  // MPI reads the host copy next: it must be there.
  PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(copy_.get()));
  return s;
}

void StagedMpiComm::stage_in(Staging& s, void* device, size_t offset, size_t bytes, cudaEvent_t after) {
  // The destination may still be read by compute work queued before the operation was
  // posted (a receive buffer of an earlier microbatch): the copy waits for it.
  cuda::Event now;
  if (!after) {
    PPTRAIN_CUDA_CHECK(cudaEventRecord(now.get(), compute_));
    after = now.get();
  }
  PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), after, 0));
  PPTRAIN_CUDA_CHECK(cudaMemcpyAsync(device, s.host() + offset, bytes, cudaMemcpyHostToDevice, copy_.get()));
  s.copied = std::make_unique<cuda::Event>();
  PPTRAIN_CUDA_CHECK(cudaEventRecord(s.copied->get(), copy_.get()));
  PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute_, s.copied->get(), 0));
}

void StagedMpiComm::give_back(std::shared_ptr<Staging> s) {
  if (!s || !s->buffer) return;
  if (s->copied) retiring_.push_back({std::move(s->buffer), std::move(s->copied)});
  else free_.emplace(s->buffer->bytes(), std::move(s->buffer));
}

// ---- blocking collectives: out, MPI on the host, back in --------------------------------

namespace {
// data[bytes] to the host, `on_host` on the host copy (typed as data), and all of it back.
template <typename T, typename OnHost>
void round_trip(StagedMpiComm& comm, T* data, size_t bytes, OnHost on_host) {
  std::shared_ptr<StagedMpiComm::Staging> s = comm.stage_out(data, bytes);
  on_host(reinterpret_cast<T*>(s->host()));
  comm.stage_in(*s, data, 0, bytes, nullptr);
  comm.give_back(std::move(s));
}
}  // namespace

void StagedMpiComm::allreduce(float* data, size_t n, ReduceOp op) {
  round_trip(*this, data, n * sizeof(float), [&](float* host) { group_.allreduce(host, n, op); });
}

void StagedMpiComm::allreduce(double* data, size_t n, ReduceOp op) { group_.allreduce(data, n, op); }

void StagedMpiComm::allreduce(bfloat16* data, size_t n, ReduceOp op) {
  round_trip(*this, data, n * sizeof(bfloat16), [&](bfloat16* host) { group_.allreduce(host, n, op); });
}

void StagedMpiComm::reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) {
  const size_t part = count * sizeof(float), mine = size_t(rank()) * part;
  std::shared_ptr<Staging> s = stage_out(send, size_t(size()) * part);
  float* host = reinterpret_cast<float*>(s->host());
  group_.reduce_scatter(host, host + size_t(rank()) * count, count, op);
  stage_in(*s, recv, mine, part, nullptr);
  give_back(std::move(s));
}

void StagedMpiComm::allgather(float* data, size_t count) {
  round_trip(*this, data, size_t(size()) * count * sizeof(float), [&](float* host) { group_.allgather(host, count); });
}

void StagedMpiComm::allgather(bfloat16* data, size_t count) {
  round_trip(*this, data, size_t(size()) * count * sizeof(bfloat16),
             [&](bfloat16* host) { group_.allgather(host, count); });
}

void StagedMpiComm::broadcast(void* data, size_t bytes, int root) { group_.broadcast(data, bytes, root); }
void StagedMpiComm::barrier() { group_.barrier(); }

// ---- non-blocking: out now, MPI in flight, back in when done -----------------------------

std::unique_ptr<Request> StagedMpiComm::ireduce_scatter(float* data, size_t count, ReduceOp op) {
  const size_t part = count * sizeof(float);
  std::shared_ptr<Staging> s = stage_out(data, size_t(size()) * part);
  std::unique_ptr<Request> mpi = group_.ireduce_scatter(reinterpret_cast<float*>(s->host()), count, op);
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(mpi), data + size_t(rank()) * count,
                                         size_t(rank()) * part, part);
}

std::unique_ptr<Request> StagedMpiComm::iallgather(float* data, size_t count) {
  const size_t bytes = size_t(size()) * count * sizeof(float);
  std::shared_ptr<Staging> s = stage_out(data, bytes);
  std::unique_ptr<Request> mpi = group_.iallgather(reinterpret_cast<float*>(s->host()), count);
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(mpi), data, 0, bytes);
}

std::unique_ptr<Request> StagedMpiComm::iallgather(bfloat16* data, size_t count) {
  const size_t bytes = size_t(size()) * count * sizeof(bfloat16);
  std::shared_ptr<Staging> s = stage_out(data, bytes);
  std::unique_ptr<Request> mpi = group_.iallgather(reinterpret_cast<bfloat16*>(s->host()), count);
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(mpi), data, 0, bytes);
}

std::unique_ptr<Request> StagedMpiComm::isend(const void* data, size_t bytes, int peer, int tag) {
  std::shared_ptr<Staging> s = stage_out(data, bytes);
  std::unique_ptr<Request> mpi = group_.isend(s->host(), bytes, peer, tag);
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(mpi), nullptr, 0, 0);
}

std::unique_ptr<Request> StagedMpiComm::irecv(void* data, size_t bytes, int peer, int tag) {
  std::shared_ptr<Staging> s = lend(bytes);
  auto posted = std::make_unique<cuda::Event>();
  PPTRAIN_CUDA_CHECK(cudaEventRecord(posted->get(), compute_));
  std::unique_ptr<Request> mpi = group_.irecv(s->host(), bytes, peer, tag);
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(mpi), data, 0, bytes, std::move(posted));
}

std::unique_ptr<Communicator> make_staged_mpi_comm(MpiComm& group, Ops& ops) {
  auto* cuda_ops = dynamic_cast<cuda::CudaOps*>(&ops);
  if (!cuda_ops)
    fail("parallel.comm: the staged MPI transport is for the cuda backend, got backend '", ops.name(), "'");
  return std::make_unique<StagedMpiComm>(group, cuda_ops->compute_stream());
}

}  // namespace pptrain
