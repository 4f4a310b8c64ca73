// The emulated CUPTI activity API (emu/cupti_emu.h) that the kernel recorder runs against in
// the emulated build: records of the work as it runs, the external correlation of each API
// call to the id pushed on its thread, buffers handed out and filled as CUPTI does (several
// when one does not hold them all), and nothing recorded while the activities are off.
#define PPTRAIN_EMULATED 1  // this binary links the emulated cuda backend

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "emu/cupti_emu.h"
#include "emu/cuda_runtime_emu.h"

namespace {

// Buffers of room for two memset records at most, so three records take two buffers.
int buffers_requested = 0, buffers_completed = 0;
bool overfilled = false;  // a buffer came back with more valid bytes than it has
std::vector<CUpti_ActivityMemset4> memsets;
std::map<uint32_t, uint64_t> external;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  ++buffers_requested;
  *size = 2 * ((sizeof(CUpti_ActivityMemset4) + 7) / 8 * 8);
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t size, size_t valid) {
  ++buffers_completed;
  overfilled = overfilled || valid > size;
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) memsets.push_back(*reinterpret_cast<CUpti_ActivityMemset4*>(r));
    if (r->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      auto* e = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(r);
      external[e->correlationId] = e->externalId;
    }
  }
  std::free(buffer);
}

TEST(EmuCupti, RecordsRunWorkWithItsCallersIdAcrossSeveralBuffers) {
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), CUPTI_ERROR_NOT_INITIALIZED);  // no buffers yet
  ASSERT_EQ(cuptiActivityRegisterCallbacks(requested, completed), CUPTI_SUCCESS);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);

  ASSERT_EQ(cudaMemsetAsync(p, 0, 8, stream), cudaSuccess);  // before enabling: no record
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 7), CUPTI_SUCCESS);
  ASSERT_EQ(cudaMemsetAsync(p, 1, 16, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(p, 2, 24, stream), cudaSuccess);
  uint64_t last = 0;
  ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), CUPTI_SUCCESS);
  EXPECT_EQ(last, 7u);
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
            CUPTI_ERROR_QUEUE_EMPTY);
  ASSERT_EQ(cudaMemsetAsync(p, 3, 32, stream), cudaSuccess);  // no id pushed: no external record

  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  if (pptrain::cuda_emu::lazy_streams()) {
    EXPECT_TRUE(memsets.empty()) << "a record before the work ran";
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
  // 3 memsets and 2 external correlations: 3 · 48 + 2 · 24 bytes of records (padded to 8)
  // in buffers of 96: two buffers at least, none overfilled.
  ASSERT_EQ(memsets.size(), 3u);
  EXPECT_GE(buffers_completed, 2);
  EXPECT_FALSE(overfilled);
  EXPECT_EQ(buffers_requested, buffers_completed);
  EXPECT_EQ(memsets[0].bytes, 16u);
  EXPECT_EQ(memsets[2].bytes, 32u);
  for (const auto& m : memsets) EXPECT_LE(m.start, m.end);
  EXPECT_EQ(external.size(), 2u);
  EXPECT_EQ(external.at(memsets[0].correlationId), 7u);
  EXPECT_EQ(external.at(memsets[1].correlationId), 7u);
  EXPECT_EQ(external.count(memsets[2].correlationId), 0u);

  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), CUPTI_SUCCESS);
  ASSERT_EQ(cudaMemsetAsync(p, 4, 8, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_EQ(memsets.size(), 3u) << "recorded while disabled";
  EXPECT_EQ(cuptiActivityEnable(CUpti_ActivityKind(99)), CUPTI_ERROR_INVALID_KIND);
  cudaFree(p);
  cudaStreamDestroy(stream);
}

}  // namespace
