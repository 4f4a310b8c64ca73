// The emulated CUDA runtime (see cuda_runtime_emu.h; cuBLAS and cuBLASLt are in
// cublas_emu.cpp and cublaslt_emu.cpp). Kernels run synchronously at launch under the SIMT
// emulator; the asynchronous work a stream can hold is what enqueue_stream_work queued on
// it (the emulated NCCL's transfers), kept in a side table keyed by stream. An event holds
// the work its stream had pending when it was recorded: the eager streams of
// PPTRAIN_EMU_STREAMS=eager. By default (lazy::on()) the calls below defer to
// lazy_streams_emu.cpp instead.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "emu/cuda_runtime_emu.h"
#include "emu/cupti_emu.h"
#include "emu/lazy_streams.h"

using pptrain::cuda_emu::StreamWork;
using WorkList = std::vector<std::shared_ptr<StreamWork>>;

namespace lazy = pptrain::cuda_emu::lazy;

using Clock = std::chrono::steady_clock;

struct CUevent_st {
  WorkList work;    // what the stream had pending at the last cudaEventRecord
  lazy::Mark mark;  // lazy streams: where its stream stood then
  bool recorded = false;
  // The event's time: eager, the host's clock at the last record; lazy, the clock when its
  // stream reached it (an item queued at the record sets it), so the time between two events
  // is what the work between them took to run, as on a GPU. Shared with that item: the event
  // may be recorded again or destroyed before its stream gets there.
  std::shared_ptr<Clock::time_point> at = std::make_shared<Clock::time_point>();
  int late_answers = 0;  // PPTRAIN_EMU_LATE_EVENTS: "not ready" answers left to this record
};

namespace {

// Host waits for device work the program asked for (pptrain::cuda_emu::host_waits), and how
// many of them were cudaFree: a caching allocator frees its blocks at exit, and how many
// blocks it grew to can depend on the order in which ranks released buffers, so a count of
// a step's waits leaves the frees out.
std::atomic<uint64_t> waits_counted{0}, frees_counted{0};
void count_wait() { waits_counted.fetch_add(1, std::memory_order_relaxed); }
// PPTRAIN_EMU_HOST_WAITS set: the total at exit, on stderr.
struct WaitReport {
  ~WaitReport() {
    if (std::getenv("PPTRAIN_EMU_HOST_WAITS"))
      std::fprintf(stderr, "emulated cuda: %llu host waits (%llu of them cudaFree)\n",
                   (unsigned long long)waits_counted.load(), (unsigned long long)frees_counted.load());
  }
} wait_report;

// Pending work per stream (nullptr: the default stream). The mutex guards the table only;
// waiting happens outside it.
std::mutex table_mutex;
std::unordered_map<cudaStream_t, WorkList> pending_by_stream;

// Polls every item of `work` (waiting for each with `block`) and drops the finished ones.
// cudaErrorNotReady while any is pending, cudaErrorLaunchFailure (the reason on stderr) if
// one failed.
cudaError_t settle(WorkList& work, bool block) {
  cudaError_t result = cudaSuccess;
  WorkList still_pending;
  for (auto& w : work) {
    switch (w->poll(block)) {
      case StreamWork::State::pending: still_pending.push_back(w); break;
      case StreamWork::State::done: break;
      case StreamWork::State::failed:  // stays in the list: the error is sticky
        still_pending.push_back(w);
        std::fprintf(stderr, "emulated stream work failed: %s\n", w->error().c_str());
        result = cudaErrorLaunchFailure;
        break;
    }
  }
  work.swap(still_pending);
  if (result == cudaSuccess && !work.empty()) result = cudaErrorNotReady;
  return result;
}

// Drops the finished work of `stream` and returns a copy of what is still pending.
WorkList pending_of(cudaStream_t stream, cudaError_t* status) {
  std::lock_guard<std::mutex> lock(table_mutex);
  auto it = pending_by_stream.find(stream);
  if (it == pending_by_stream.end()) {
    *status = cudaSuccess;
    return {};
  }
  *status = settle(it->second, false);
  if (*status == cudaErrorNotReady) *status = cudaSuccess;
  return it->second;
}

// Waits for everything queued on `stream` so far.
cudaError_t synchronize(cudaStream_t stream) {
  WorkList work;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = pending_by_stream.find(stream);
    if (it == pending_by_stream.end()) return cudaSuccess;
    work.swap(it->second);
  }
  return settle(work, true);
}

}  // namespace

void pptrain::cuda_emu::enqueue_stream_work(cudaStream_t stream, std::shared_ptr<StreamWork> work) {
  if (lazy::on()) return lazy::queue_work(stream, std::move(work));
  std::lock_guard<std::mutex> lock(table_mutex);
  pending_by_stream[stream].push_back(std::move(work));
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unrecognized error code";
}

// Kernel faults surface as exceptions from the launch itself, never as a sticky error.
cudaError_t cudaGetLastError() { return cudaSuccess; }

namespace {
int emulated_devices() {
  const char* v = std::getenv("PPTRAIN_EMU_DEVICES");
  const int n = v ? std::atoi(v) : 8;
  return n >= 1 ? n : 1;
}
int current_device = 0;
}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emulated_devices();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emulated_devices()) return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const char* v = std::getenv("PPTRAIN_EMU_DEVICE_GIB");
  const double gib = v ? std::atof(v) : 80.0;
  *total_bytes = size_t((gib > 0 ? gib : 80.0) * 1073741824.0);
  *free_bytes = *total_bytes;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes ? bytes : 1);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
bool pptrain::cuda_emu::lazy_streams() { return lazy::on(); }

void pptrain::cuda_emu::enqueue_op(cudaStream_t stream, OpActivity what, std::function<void()> op) {
  namespace cupti = pptrain::cupti_emu;
  const uint32_t correlation = cupti::api_call();
  auto run = [stream, what, correlation, op = std::move(op)] {
    const uint64_t start = cupti::now_ns();
    op();
    cupti::ran(what.kind, what.name, what.bytes, uint32_t(reinterpret_cast<uintptr_t>(stream) >> 4),
               start, cupti::now_ns(), correlation);
  };
  if (lazy::on()) lazy::queue(stream, std::move(run));
  else run();
}

namespace {
// Kernel launches reach enqueue_op through the SIMT emulator's hook (emu.h).
void queue_launch(pptrain::emu::Stream* stream, const char* name, std::function<void()> op) {
  pptrain::cuda_emu::enqueue_op(stream, {pptrain::cupti_emu::Op::kernel, name, 0}, std::move(op));
}
[[maybe_unused]] const bool kLaunchesHooked = (pptrain::emu::set_stream_queue(&queue_launch), true);
}  // namespace

void pptrain::cuda_emu::run_queued_ops(cudaStream_t stream) {
  if (lazy::on()) (void)lazy::run(stream, lazy::kAll, false);
}

cudaError_t cudaDeviceSynchronize() {
  count_wait();
  if (lazy::on()) return lazy::run_all();
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    for (auto& [stream, work] : pending_by_stream) streams.push_back(stream);
  }
  cudaError_t result = cudaSuccess;
  for (cudaStream_t stream : streams)
    if (cudaError_t err = synchronize(stream); err != cudaSuccess) result = err;
  return result;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  constexpr size_t kAlign = 256;
  if (bytes > ~size_t(0) - kAlign) return cudaErrorMemoryAllocation;
  *ptr = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  // cudaFree waits for the device: work still queued may use the memory.
  if (ptr) {
    count_wait();
    frees_counted.fetch_add(1, std::memory_order_relaxed);
  }
  if (lazy::on())
    if (cudaError_t err = lazy::run_all(); err != cudaSuccess) return err;
  std::free(ptr);
  return cudaSuccess;
}
// The synchronous copy and fill run on the legacy default stream (lazy: its work first);
// they do not wait for streams created cudaStreamNonBlocking, on a GPU either.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes && (!dst || !src)) return cudaErrorInvalidValue;
  if (lazy::on())
    if (cudaError_t err = lazy::run(nullptr, lazy::kAll, true); err != cudaSuccess) return err;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  if (bytes && (!dst || !src)) return cudaErrorInvalidValue;
  if (bytes)
    pptrain::cuda_emu::enqueue_op(stream, {pptrain::cupti_emu::Op::memcpy, "memcpy", bytes},
                                  [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes && !ptr) return cudaErrorInvalidValue;
  if (lazy::on())
    if (cudaError_t err = lazy::run(nullptr, lazy::kAll, true); err != cudaSuccess) return err;
  if (bytes) std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes && !ptr) return cudaErrorInvalidValue;
  if (bytes)
    pptrain::cuda_emu::enqueue_op(stream, {pptrain::cupti_emu::Op::memset, "memset", bytes},
                                  [=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new (std::nothrow) pptrain::emu::Stream();
  return *stream ? cudaSuccess : cudaErrorMemoryAllocation;
}
// Like cudaStreamDestroy, lets queued work finish (here: waits for it, since the buffers
// it uses may be freed right after).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (lazy::on()) {
    cudaError_t result = lazy::run(stream, lazy::kAll, true);
    lazy::forget(stream);
    delete stream;
    return result;
  }
  cudaError_t result = synchronize(stream);
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    pending_by_stream.erase(stream);
  }
  delete stream;
  return result;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  count_wait();
  return pptrain::cuda_emu::finish_stream(stream);
}
cudaError_t pptrain::cuda_emu::finish_stream(cudaStream_t stream) {
  return lazy::on() ? lazy::run(stream, lazy::kAll, true) : synchronize(stream);
}
uint64_t pptrain::cuda_emu::host_waits() { return waits_counted.load(std::memory_order_relaxed); }
// On a GPU the stream waits and the host goes on; in emulation the host waits here for the
// event's work, which orders everything queued on `stream` afterwards the same way (only
// later, so the emulation can never run ahead of what a GPU allows).
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  if (!event) return cudaErrorInvalidResourceHandle;
  if (lazy::on()) return lazy::run(event->mark.stream, event->mark.seq, true);
  return settle(event->work, true);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new (std::nothrow) CUevent_st();
  return *event ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
namespace {
// PPTRAIN_EMU_LATE_EVENTS=N: each record answers its first N queries "not ready" without
// running anything, as a GPU that is behind its host does (0 or unset: none).
int late_events() {
  static const int n = [] {
    const char* v = std::getenv("PPTRAIN_EMU_LATE_EVENTS");
    return v ? std::max(0, std::atoi(v)) : 0;
  }();
  return n;
}
}  // namespace

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return cudaErrorInvalidResourceHandle;
  event->late_answers = late_events();
  cudaError_t status = cudaSuccess;
  event->at = std::make_shared<Clock::time_point>(Clock::now());
  if (lazy::on()) {
    lazy::queue(stream, [at = event->at] { *at = Clock::now(); });
    event->mark = lazy::mark(stream);
  } else {
    event->work = pending_of(stream, &status);
  }
  event->recorded = true;
  return status;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end || !start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  if (lazy::on() && (!lazy::reached(start->mark) || !lazy::reached(end->mark))) return cudaErrorNotReady;
  for (cudaEvent_t e : {start, end})
    if (cudaError_t status = settle(e->work, false); status != cudaSuccess) return status;
  *ms = std::chrono::duration<float, std::milli>(*end->at - *start->at).count();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  count_wait();
  if (lazy::on()) return lazy::run(event->mark.stream, event->mark.seq, true);
  return settle(event->work, true);
}
// A query may find the work done: a GPU makes progress on its own (lazy: what the event
// waits for runs now, up to a transfer still in flight).
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  if (event->late_answers > 0) {
    --event->late_answers;
    return cudaErrorNotReady;
  }
  if (lazy::on()) {
    cudaError_t err = lazy::run(event->mark.stream, event->mark.seq, false);
    return err == cudaSuccess && !lazy::reached(event->mark) ? cudaErrorNotReady : err;
  }
  return settle(event->work, false);
}
