// The emulated CUDA runtime's lazy streams (emu/cuda_runtime_emu.h, lazy_streams_emu.cpp):
// work runs on its stream as late as the program allows, so work on another stream that is
// not ordered after it by an event sees the memory as it was before -- the race a GPU may
// or may not show, made to show every time. Each case runs the ordered and the unordered
// program side by side. The layouts' own tests (test_staged_comm, test_zero, the
// test_cuda_backend_train* equivalence runs) then run every transfer path this way.
#define PPTRAIN_EMULATED 1  // this binary links the emulated cuda backend

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/cublas_emu.h"
#include "emu/cuda_runtime_emu.h"
#include "emu/emu.h"
#include "launch.cuh"

namespace {

using pptrain::kernels::LaunchContext;

__global__ void fill_kernel(float* out, float value, int n) {
  int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

// Device memory freed at the end of the test.
struct Device {
  explicit Device(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess); }
  ~Device() { cudaFree(ptr); }
  void* ptr = nullptr;
};
struct StreamHandle {
  StreamHandle() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~StreamHandle() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};
struct EventHandle {
  EventHandle() { EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess); }
  ~EventHandle() { cudaEventDestroy(e); }
  cudaEvent_t e = nullptr;
};

constexpr int kN = 64;

// PPTRAIN_EMU_STREAMS=eager (the emulator as it ran work before: at its call) is for
// telling a stream-ordering failure from another one; these cases need the lazy streams.
class EmuStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!pptrain::cuda_emu::lazy_streams()) GTEST_SKIP() << "PPTRAIN_EMU_STREAMS=eager: streams run work at its call";
  }
};

TEST(EmuStreamsDefault, StreamsAreLazyUnlessEagerIsAsked) {
  const char* v = std::getenv("PPTRAIN_EMU_STREAMS");
  EXPECT_EQ(pptrain::cuda_emu::lazy_streams(), !(v && std::string(v) == "eager"));
}

// A kernel fills a buffer on the compute stream; a copy stream copies it to the host. With
// the copy ordered after the kernel (an event) the host gets the fill; without, the copy
// runs first and gets what was there before (zeros), as a GPU may.
TEST_F(EmuStreams, ACopyOnAnotherStreamSeesAKernelsResultOnlyAfterAnEvent) {
  for (bool ordered : {true, false}) {
    SCOPED_TRACE(ordered ? "ordered by an event" : "not ordered");
    StreamHandle compute, copy;
    EventHandle ready;
    Device buffer(kN * sizeof(float));
    ASSERT_EQ(cudaMemset(buffer.ptr, 0, kN * sizeof(float)), cudaSuccess);
    pptrain::kernels::launch(LaunchContext{compute.s}, "fill", fill_kernel, dim3(1), dim3(kN), 0,
                             static_cast<float*>(buffer.ptr), 3.0f, kN);
    if (ordered) {
      ASSERT_EQ(cudaEventRecord(ready.e, compute.s), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(copy.s, ready.e, 0), cudaSuccess);
    }
    std::vector<float> host(kN, -1.0f);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), buffer.ptr, kN * sizeof(float), cudaMemcpyDeviceToHost, copy.s),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(copy.s), cudaSuccess);
    EXPECT_EQ(host[0], ordered ? 3.0f : 0.0f);
    EXPECT_EQ(host[kN - 1], ordered ? 3.0f : 0.0f);
    // The kernel itself ran at the latest when its stream was synchronised.
    ASSERT_EQ(cudaStreamSynchronize(compute.s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(host.data(), buffer.ptr, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[0], 3.0f);
  }
}

// The other direction: a host-to-device copy lands on a copy stream while a GEMM on the
// compute stream reads the buffer. Unordered, the GEMM reads the old contents.
TEST_F(EmuStreams, AGemmSeesACopyOnlyAfterAnEvent) {
  for (bool ordered : {true, false}) {
    SCOPED_TRACE(ordered ? "ordered by an event" : "not ordered");
    StreamHandle compute, copy;
    EventHandle copied;
    cublasHandle_t handle = nullptr;
    ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(handle, compute.s), CUBLAS_STATUS_SUCCESS);
    Device a(4 * sizeof(float)), c(4 * sizeof(float));
    ASSERT_EQ(cudaMemset(a.ptr, 0, 4 * sizeof(float)), cudaSuccess);
    const std::vector<float> ones(4, 1.0f);
    ASSERT_EQ(cudaMemcpyAsync(a.ptr, ones.data(), 4 * sizeof(float), cudaMemcpyHostToDevice, copy.s), cudaSuccess);
    if (ordered) {
      ASSERT_EQ(cudaEventRecord(copied.e, copy.s), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(compute.s, copied.e, 0), cudaSuccess);
    }
    // C[2x2] = A[2x2] · A[2x2] (column-major), every element 2 for a matrix of ones.
    const float alpha = 1.0f, beta = 0.0f;
    ASSERT_EQ(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a.ptr, CUDA_R_32F, 2, 0,
                                         a.ptr, CUDA_R_32F, 2, 0, &beta, c.ptr, CUDA_R_32F, 2, 0, 1,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    std::vector<float> out(4, -1.0f);
    ASSERT_EQ(cudaStreamSynchronize(compute.s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(out.data(), c.ptr, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(out[3], ordered ? 2.0f : 0.0f);
    ASSERT_EQ(cudaStreamSynchronize(copy.s), cudaSuccess);
    cublasDestroy(handle);
  }
}

// Events: a query runs what the event waits for (a GPU progresses on its own), timing needs
// both events reached, and the synchronous cudaMemcpy does not wait for non-blocking streams.
TEST_F(EmuStreams, EventsQueriesAndTheDefaultStream) {
  StreamHandle compute;
  Device buffer(kN * sizeof(float));
  ASSERT_EQ(cudaMemset(buffer.ptr, 0, kN * sizeof(float)), cudaSuccess);
  cudaEvent_t start = nullptr, end = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&start, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&end, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, compute.s), cudaSuccess);
  pptrain::kernels::launch(LaunchContext{compute.s}, "fill", fill_kernel, dim3(1), dim3(kN), 0,
                           static_cast<float*>(buffer.ptr), 5.0f, kN);
  ASSERT_EQ(cudaEventRecord(end, compute.s), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);  // the fill has not run
  std::vector<float> host(kN, -1.0f);
  ASSERT_EQ(cudaMemcpy(host.data(), buffer.ptr, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[0], 0.0f);  // the legacy default stream does not wait for a non-blocking one
  EXPECT_EQ(cudaEventQuery(end), cudaSuccess);  // the query ran the fill
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), buffer.ptr, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[kN - 1], 5.0f);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
}

// cudaFree waits for the device: queued work that writes the memory runs first.
TEST_F(EmuStreams, FreeingMemoryRunsTheWorkQueuedBeforeIt) {
  StreamHandle compute;
  std::vector<float> host(kN, -1.0f);
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buffer, 0, kN * sizeof(float), compute.s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), buffer, kN * sizeof(float), cudaMemcpyDeviceToHost, compute.s), cudaSuccess);
  EXPECT_EQ(host[0], -1.0f);  // queued
  ASSERT_EQ(cudaFree(buffer), cudaSuccess);
  EXPECT_EQ(host[0], 0.0f);
}

}  // namespace
