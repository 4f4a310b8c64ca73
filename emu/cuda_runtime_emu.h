// The slice of the CUDA runtime API the cuda backend uses, for the emulated build only
// (tests and pptrain-emu): "device" memory is host memory, streams are the SIMT emulator's
// emu::Stream. Streams are lazy (below): kernels, GEMMs, copies and fills run when
// something needs them. With PPTRAIN_EMU_STREAMS=eager they run to completion at their
// call instead, and the only asynchronous work is what the emulated NCCL (nccl_emu.h)
// queues on a stream with enqueue_stream_work (its MPI transfers); an event then captures
// the work pending on its stream when recorded and is complete once that work is. Names,
// signatures and error codes follow cuda_runtime_api.h so src/backend/cuda compiles
// unchanged against either header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "emu/cupti_emu.h"
#include "emu/emu.h"  // cudaStream_t = pptrain::emu::Stream*

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,  // queued stream work failed (the emulated NCCL's MPI transfers)
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDefault = 0x0;
constexpr unsigned cudaEventDisableTiming = 0x2;
constexpr unsigned cudaStreamNonBlocking = 0x1;

const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();

// PPTRAIN_EMU_DEVICES emulated devices (default 8, so each rank of a test job has one of
// its own; 1 emulates a one-GPU node, whose ranks share it). They share the host's memory.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
// Each emulated device has PPTRAIN_EMU_DEVICE_GIB GiB (default 80), all of it free.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDeviceSynchronize();

// 256-byte aligned like cudaMalloc; cudaErrorMemoryAllocation when the host is out of memory.
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
// Page-locked host memory: plain host memory here.
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// cudaErrorNotReady while the work before the record is pending. With
// PPTRAIN_EMU_LATE_EVENTS=N, each record's first N queries answer that without running
// anything (lazy streams run the work a query needs, so the answer would otherwise always
// be "done"): code that holds work back until the device is done is then driven through
// its "not yet" paths, as on a GPU that is behind its host.
cudaError_t cudaEventQuery(cudaEvent_t event);
// Milliseconds from `start` to `end`, both recorded and reached (cudaErrorNotReady while
// either has work pending). An event's time is the host's clock when its stream reached it
// (lazy streams: the time between two events is what the work between them took to run) or,
// with PPTRAIN_EMU_STREAMS=eager, at its record.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- emulator extension (not CUDA API) --------------------------------------------------------
namespace pptrain::cuda_emu {

// Asynchronous work queued on a stream. Once poll() has returned done or failed it keeps
// returning that (several events may capture the same work).
class StreamWork {
 public:
  enum class State { pending, done, failed };
  virtual ~StreamWork() = default;
  // Checks for completion; with `block`, waits until the work is done or has failed.
  virtual State poll(bool block) = 0;
  // Why it failed (printed to stderr when a runtime call reports cudaErrorLaunchFailure).
  virtual std::string error() const = 0;
};

// Appends `work` to `stream`: events recorded on the stream afterwards, and
// cudaStreamSynchronize, wait for it.
void enqueue_stream_work(cudaStream_t stream, std::shared_ptr<StreamWork> work);

// Lazy streams (the default; PPTRAIN_EMU_STREAMS=eager: as described at the top). A GPU
// runs a stream's work some time after it is queued; eager streams take the earliest time,
// lazy ones the latest the program allows: kernels, GEMMs, copies and fills wait on their
// stream, in order, until something needs them -- a synchronisation of the stream, the
// device or an event recorded after them (cudaStreamWaitEvent included: the host waits for
// that work, as it does in eager mode), a query of such an event, the emulated NCCL posting
// a transfer or collective on the stream, cudaMemcpy/cudaMemset (the legacy default stream
// only: pptrain's streams do not block with it), cudaFree (the whole device). So a consumer
// that is not ordered after its producer by an event reads what was there before, and a
// buffer freed while queued work still uses it can be overwritten first: both fail the
// equivalence tests instead of passing by luck. cudaDeviceSynchronize runs the streams
// newest first (communication streams before the compute stream that feeds them).
bool lazy_streams();
// What an operation is, for the emulated CUPTI's activity records (cupti_emu.h): a kernel
// (a GEMM too, as cuBLAS runs one), a copy or a fill, with its name and bytes.
struct OpActivity {
  cupti_emu::Op kind = cupti_emu::Op::kernel;
  const char* name = "";
  size_t bytes = 0;
};
// Queues `op` on `stream` (lazy) or runs it now (eager); either way an API call for CUPTI now
// and a record of its run when it runs. Kernel launches come here through emu.h's hook.
void enqueue_op(cudaStream_t stream, OpActivity what, std::function<void()> op);
// Lazy streams: runs what `stream` holds up to the first transfer still in flight (never
// blocking on one): what the emulated NCCL calls before it posts a transfer.
void run_queued_ops(cudaStream_t stream);
// Runs `stream` to its end, as cudaStreamSynchronize does but not counted as the program's
// wait: what an emulated library (nccl_emu.cpp) does to order its own work after the stream's.
cudaError_t finish_stream(cudaStream_t stream);
// How many times the program has waited on the host for device work: calls of
// cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize and cudaFree (which
// waits for the device on a GPU). With PPTRAIN_EMU_HOST_WAITS set, the total is printed to
// stderr at exit ("emulated cuda: N host waits (F of them cudaFree)"): the tests count a
// step's waits with it.
uint64_t host_waits();

}  // namespace pptrain::cuda_emu
