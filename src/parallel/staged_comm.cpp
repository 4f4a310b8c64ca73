// StagedMpiComm (staged_comm.h): MPI for the cuda backend's tensors through pinned host
// buffers.
#include "parallel/staged_comm.h"

#include <algorithm>
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
  std::unique_ptr<cuda::Event> out;     // the D2H that fills the buffer, where not waited for
  std::unique_ptr<cuda::Event> copied;  // the H2D that reads the buffer, once issued
  char* host() const { return static_cast<char*>(buffer->data()); }
};

struct StagedMpiComm::Slot {
  std::unique_ptr<Request> mpi;  // set when posted
  bool abandoned = false;        // its request was destroyed before the post: never post it
};

namespace {

// Every StagedMpiComm of this process, in the order made (the pp group's, the tp group's,
// ZeRO-1's dp group's...): progress() posts what any of them holds, so a rank about to wait
// in MPI has first posted everything its peers may be waiting for. One thread drives MPI
// (MPI_THREAD_FUNNELED), so no lock.
std::vector<StagedMpiComm*>& live_comms() {
  static std::vector<StagedMpiComm*> comms;
  return comms;
}

// A non-blocking operation of StagedMpiComm: the MPI request on the pinned buffer, posted
// when the copy into it is done (held back until then, unless nothing had to be copied),
// then (when it has a device destination) the copy back, issued by whichever of wait() and
// test() first sees MPI done. wait() orders the compute stream after that copy without
// blocking the host for it; test() is true once MPI is done and the copy is issued (the
// compute stream is ordered after it then).
class StagedRequest final : public Request {
 public:
  StagedRequest(StagedMpiComm& comm, std::shared_ptr<StagedMpiComm::Staging> staging,
                std::shared_ptr<StagedMpiComm::Slot> slot, void* dst, size_t offset, size_t bytes,
                std::unique_ptr<cuda::Event> posted = nullptr)
      : comm_(comm), staging_(std::move(staging)), posted_(std::move(posted)), slot_(std::move(slot)), dst_(dst),
        offset_(offset), bytes_(bytes) {}
  ~StagedRequest() override {
    if (!slot_->mpi) slot_->abandoned = true;
  }
  void wait() override {
    if (landed_) return;
    // Everything held, this one included, is posted before the host waits in MPI: a peer
    // may need any of it before it sends what this waits for.
    comm_.progress(/*all=*/true);
    slot_->mpi->wait();
    land();
  }
  bool test() override {
    if (landed_) return true;
    comm_.progress(/*all=*/false);
    if (!slot_->mpi || !slot_->mpi->test()) return false;
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
  std::shared_ptr<StagedMpiComm::Staging> staging_;  // before slot_: destroyed after its request
  std::unique_ptr<cuda::Event> posted_;             // irecv: the compute stream at the post
  std::shared_ptr<StagedMpiComm::Slot> slot_;
  void* dst_;
  size_t offset_, bytes_;
  bool landed_ = false;
};

}  // namespace

StagedMpiComm::StagedMpiComm(MpiComm& group, cudaStream_t compute_stream)
    : own_(group.split(0, group.rank(), group.name())), compute_(compute_stream) {
  own_.set_max_count(group.max_count());
  live_comms().push_back(this);
}

StagedMpiComm::~StagedMpiComm() {
  auto& comms = live_comms();
  comms.erase(std::remove(comms.begin(), comms.end(), this), comms.end());
  (void)cudaStreamSynchronize(copy_.get());  // every copy from or into a pooled buffer
}

void StagedMpiComm::progress(bool all) {
  for (StagedMpiComm* comm : live_comms()) comm->post_held(all);
}

void StagedMpiComm::post_held(bool all) {
  while (!held_.empty()) {
    Held& h = held_.front();
    if (!h.slot->abandoned) {
      if (h.staging->out) {
        const cudaError_t err = cudaEventQuery(h.staging->out->get());
        if (err == cudaErrorNotReady) {
          if (!all) return;  // in order: the ones behind it were copied later
          PPTRAIN_CUDA_CHECK(cudaEventSynchronize(h.staging->out->get()));
        } else {
          PPTRAIN_CUDA_CHECK(err);
        }
      }
      h.slot->mpi = h.post(h.staging->host());
    }
    held_.pop_front();
  }
}

std::unique_ptr<Request> StagedMpiComm::post_when_copied(const void* data, size_t bytes, PostOnHost post, void* dst,
                                                        size_t offset, size_t back) {
  std::shared_ptr<Staging> s = stage_out(data, bytes, /*wait=*/false);
  auto slot = std::make_shared<Slot>();
  held_.push_back({s, std::move(post), slot});
  post_held(/*all=*/false);  // posted now if its copy is already done
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(slot), dst, offset, back);
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

std::shared_ptr<StagedMpiComm::Staging> StagedMpiComm::stage_out(const void* device, size_t bytes, bool wait) {
  std::shared_ptr<Staging> s = lend(bytes);
  if (bytes == 0) return s;
  cuda::Event ready;
  PPTRAIN_CUDA_CHECK(cudaEventRecord(ready.get(), compute_));
  PPTRAIN_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), ready.get(), 0));
  PPTRAIN_CUDA_CHECK(cudaMemcpyAsync(s->host(), device, bytes, cudaMemcpyDeviceToHost, copy_.get()));
  if (wait) {
    PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(copy_.get()));  // a blocking call: MPI reads it next
  } else {
    s->out = std::make_unique<cuda::Event>();
    PPTRAIN_CUDA_CHECK(cudaEventRecord(s->out->get(), copy_.get()));
  }
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

// ---- blocking collectives: what is held posted first, out, MPI on the host, back in ------

namespace {
// data[bytes] to the host, `on_host` on the host copy (typed as data), and all of it back.
template <typename T, typename OnHost>
void round_trip(StagedMpiComm& comm, T* data, size_t bytes, OnHost on_host) {
  comm.progress(/*all=*/true);  // the group's collectives in the order they were issued
  std::shared_ptr<StagedMpiComm::Staging> s = comm.stage_out(data, bytes, /*wait=*/true);
  on_host(reinterpret_cast<T*>(s->host()));
  comm.stage_in(*s, data, 0, bytes, nullptr);
  comm.give_back(std::move(s));
}
}  // namespace

void StagedMpiComm::allreduce(float* data, size_t n, ReduceOp op) {
  round_trip(*this, data, n * sizeof(float), [&](float* host) { own_.allreduce(host, n, op); });
}

void StagedMpiComm::allreduce(double* data, size_t n, ReduceOp op) {
  progress(/*all=*/true);
  own_.allreduce(data, n, op);
}

void StagedMpiComm::allreduce(bfloat16* data, size_t n, ReduceOp op) {
  round_trip(*this, data, n * sizeof(bfloat16), [&](bfloat16* host) { own_.allreduce(host, n, op); });
}

void StagedMpiComm::reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) {
  progress(/*all=*/true);
  const size_t part = count * sizeof(float), mine = size_t(rank()) * part;
  std::shared_ptr<Staging> s = stage_out(send, size_t(size()) * part, /*wait=*/true);
  float* host = reinterpret_cast<float*>(s->host());
  own_.reduce_scatter(host, host + size_t(rank()) * count, count, op);
  stage_in(*s, recv, mine, part, nullptr);
  give_back(std::move(s));
}

void StagedMpiComm::allgather(float* data, size_t count) {
  round_trip(*this, data, size_t(size()) * count * sizeof(float), [&](float* host) { own_.allgather(host, count); });
}

void StagedMpiComm::allgather(bfloat16* data, size_t count) {
  round_trip(*this, data, size_t(size()) * count * sizeof(bfloat16),
             [&](bfloat16* host) { own_.allgather(host, count); });
}

void StagedMpiComm::broadcast(void* data, size_t bytes, int root) {
  progress(/*all=*/true);
  own_.broadcast(data, bytes, root);
}

void StagedMpiComm::barrier() {
  progress(/*all=*/true);
  own_.barrier();
}

// ---- non-blocking: out now, posted once copied, back in when done ------------------------

std::unique_ptr<Request> StagedMpiComm::ireduce_scatter(float* data, size_t count, ReduceOp op) {
  const size_t part = count * sizeof(float);
  return post_when_copied(
      data, size_t(size()) * part,
      [this, count, op](char* host) { return own_.ireduce_scatter(reinterpret_cast<float*>(host), count, op); },
      data + size_t(rank()) * count, size_t(rank()) * part, part);
}

std::unique_ptr<Request> StagedMpiComm::iallgather(float* data, size_t count) {
  const size_t bytes = size_t(size()) * count * sizeof(float);
  return post_when_copied(
      data, bytes, [this, count](char* host) { return own_.iallgather(reinterpret_cast<float*>(host), count); }, data,
      0, bytes);
}

std::unique_ptr<Request> StagedMpiComm::iallgather(bfloat16* data, size_t count) {
  const size_t bytes = size_t(size()) * count * sizeof(bfloat16);
  return post_when_copied(
      data, bytes, [this, count](char* host) { return own_.iallgather(reinterpret_cast<bfloat16*>(host), count); },
      data, 0, bytes);
}

std::unique_ptr<Request> StagedMpiComm::isend(const void* data, size_t bytes, int peer, int tag) {
  return post_when_copied(
      data, bytes, [this, bytes, peer, tag](char* host) { return own_.isend(host, bytes, peer, tag); }, nullptr, 0, 0);
}

// A receive needs no copy before it: posted at once (the order of receives and held sends
// does not matter to MPI's matching, which is per sender and tag).
std::unique_ptr<Request> StagedMpiComm::irecv(void* data, size_t bytes, int peer, int tag) {
  std::shared_ptr<Staging> s = lend(bytes);
  auto posted = std::make_unique<cuda::Event>();
  PPTRAIN_CUDA_CHECK(cudaEventRecord(posted->get(), compute_));
  auto slot = std::make_shared<Slot>();
  slot->mpi = own_.irecv(s->host(), bytes, peer, tag);
  return std::make_unique<StagedRequest>(*this, std::move(s), std::move(slot), data, 0, bytes, std::move(posted));
}

std::unique_ptr<Communicator> make_staged_mpi_comm(MpiComm& group, Ops& ops) {
  auto* cuda_ops = dynamic_cast<cuda::CudaOps*>(&ops);
  if (!cuda_ops)
    fail("parallel.comm: the staged MPI transport is for the cuda backend, got backend '", ops.name(), "'");
  return std::make_unique<StagedMpiComm>(group, cuda_ops->compute_stream());
}

}  // namespace pptrain
