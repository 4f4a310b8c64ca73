// The slice of CUPTI's activity API the cuda backend's kernel recorder uses
// (src/backend/cuda/kernel_recorder.cpp), for the emulated build only: the names, values
// and the record fields it reads are CUPTI 13's (cupti_activity.h); each record type holds
// only those fields. Records come from the emulated runtime: every kernel launch, GEMM,
// copy and fill is an API call (a correlation id, and an external-correlation record for the
// id pushed on this thread, as CUPTI writes) and, when it runs on its stream, a kernel,
// memcpy or memset record with the host's steady clock in ns as its start and end.
#pragma once
#include <cstddef>
#include <cstdint>

#define CUPTIAPI

enum CUptiResult {
  CUPTI_SUCCESS = 0,
  CUPTI_ERROR_INVALID_PARAMETER = 1,
  CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
  CUPTI_ERROR_NOT_INITIALIZED = 15,
  CUPTI_ERROR_QUEUE_EMPTY = 18,
  CUPTI_ERROR_INVALID_KIND = 21,
  CUPTI_ERROR_UNKNOWN = 999,
};

enum CUpti_ActivityKind {
  CUPTI_ACTIVITY_KIND_INVALID = 0,
  CUPTI_ACTIVITY_KIND_MEMCPY = 1,
  CUPTI_ACTIVITY_KIND_MEMSET = 2,
  CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
  CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION = 39,
};

enum CUpti_ExternalCorrelationKind {
  CUPTI_EXTERNAL_CORRELATION_KIND_INVALID = 0,
  CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN = 1,
  CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC = 2,
  CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 = 3,
};

enum CUpti_ActivityFlag { CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 << 0 };

struct CUpti_Activity {
  CUpti_ActivityKind kind;
};
struct CUpti_ActivityKernel10 {
  CUpti_ActivityKind kind;
  uint64_t start, end;  // ns
  uint32_t deviceId, streamId;
  int32_t gridX, gridY, gridZ, blockX, blockY, blockZ;
  uint32_t correlationId;
  const char* name;
};
struct CUpti_ActivityMemcpy6 {
  CUpti_ActivityKind kind;
  uint8_t copyKind;
  uint64_t bytes, start, end;
  uint32_t deviceId, streamId, correlationId;
};
struct CUpti_ActivityMemset4 {
  CUpti_ActivityKind kind;
  uint32_t value;
  uint64_t bytes, start, end;
  uint32_t deviceId, streamId, correlationId;
};
struct CUpti_ActivityExternalCorrelation {
  CUpti_ActivityKind kind;
  CUpti_ExternalCorrelationKind externalKind;
  uint64_t externalId;
  uint32_t correlationId;
};

using CUcontext = void*;
typedef void(CUPTIAPI* CUpti_BuffersCallbackRequestFunc)(uint8_t** buffer, size_t* size, size_t* maxNumRecords);
typedef void(CUPTIAPI* CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId, uint8_t* buffer,
                                                          size_t size, size_t validSize);

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind);
CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind);
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed);
// Hands every record held so far to the client's buffers (the flag is accepted and ignored:
// every flush is forced here).
CUptiResult cuptiActivityFlushAll(uint32_t flag);
CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes, CUpti_Activity** record);
CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id);
CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* lastId);
CUptiResult cuptiGetResultString(CUptiResult result, const char** str);

// ---- emulator extension: what the emulated runtime tells it ---------------------------------
namespace pptrain::cupti_emu {

enum class Op { kernel, memcpy, memset };
// An API call that queues work: its correlation id (0 while no activity is enabled), after
// the external-correlation record for this thread's innermost pushed id.
uint32_t api_call();
// The work of call `correlation` ran from `start_ns` to `end_ns` on `stream` (an id).
void ran(Op op, const char* name, size_t bytes, uint32_t stream, uint64_t start_ns, uint64_t end_ns,
         uint32_t correlation);
uint64_t now_ns();

}  // namespace pptrain::cupti_emu
