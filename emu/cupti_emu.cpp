// The emulated CUPTI activity API (cupti_emu.h). Records are kept in order in one byte
// vector (each its struct, padded to 8 bytes) until cuptiActivityFlushAll copies them into
// the buffers the client's callback hands out, as many per buffer as fit.
#include "emu/cupti_emu.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace {

std::mutex mutex;
std::map<CUpti_ActivityKind, bool> enabled;
CUpti_BuffersCallbackRequestFunc requested_cb = nullptr;
CUpti_BuffersCallbackCompleteFunc completed_cb = nullptr;
std::vector<unsigned char> held;  // records not yet flushed
uint32_t next_correlation = 0;
thread_local std::vector<uint64_t> external_ids;  // CUSTOM0 stack of this thread

constexpr size_t padded(size_t n) { return (n + 7) / 8 * 8; }

size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return padded(sizeof(CUpti_ActivityKernel10));
    case CUPTI_ACTIVITY_KIND_MEMCPY: return padded(sizeof(CUpti_ActivityMemcpy6));
    case CUPTI_ACTIVITY_KIND_MEMSET: return padded(sizeof(CUpti_ActivityMemset4));
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return padded(sizeof(CUpti_ActivityExternalCorrelation));
    default: return 0;
  }
}

bool on(CUpti_ActivityKind kind) {  // mutex held
  auto it = enabled.find(kind);
  return it != enabled.end() && it->second;
}

template <typename Record>
void hold(const Record& r) {  // mutex held
  const size_t at = held.size();
  held.resize(at + record_size(r.kind), 0);
  std::memcpy(held.data() + at, &r, sizeof r);
}

}  // namespace

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (!record_size(kind)) return CUPTI_ERROR_INVALID_KIND;
  std::lock_guard<std::mutex> lock(mutex);
  if (!requested_cb) return CUPTI_ERROR_NOT_INITIALIZED;  // a client registers its buffers first
  enabled[kind] = true;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (!record_size(kind)) return CUPTI_ERROR_INVALID_KIND;
  std::lock_guard<std::mutex> lock(mutex);
  enabled[kind] = false;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed) {
  if (!requested || !completed) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(mutex);
  requested_cb = requested;
  completed_cb = completed;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  std::vector<unsigned char> records;
  CUpti_BuffersCallbackRequestFunc request;
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!requested_cb) return CUPTI_SUCCESS;
    records.swap(held);
    request = requested_cb;
    complete = completed_cb;
  }
  size_t at = 0;
  while (at < records.size()) {
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    request(&buffer, &size, &max_records);
    if (!buffer) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t used = 0, count = 0;
    while (at < records.size()) {
      CUpti_ActivityKind kind;
      std::memcpy(&kind, records.data() + at, sizeof kind);
      const size_t n = record_size(kind);
      if (used + n > size || (max_records && count == max_records)) break;
      std::memcpy(buffer + used, records.data() + at, n);
      used += n, at += n, ++count;
    }
    if (count == 0) return CUPTI_ERROR_INVALID_PARAMETER;  // a buffer smaller than one record
    complete(nullptr, 0, buffer, size, used);
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t at = 0;
  if (*record) {
    at = size_t(reinterpret_cast<uint8_t*>(*record) - buffer) + record_size((*record)->kind);
  }
  if (at >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + at);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_INVALID_PARAMETER;  // the one emulated
  external_ids.push_back(id);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* last) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_INVALID_PARAMETER;
  if (external_ids.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (last) *last = external_ids.back();
  external_ids.pop_back();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_QUEUE_EMPTY: *str = "CUPTI_ERROR_QUEUE_EMPTY"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; break;
  }
  return CUPTI_SUCCESS;
}

namespace pptrain::cupti_emu {

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

uint32_t api_call() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) && !on(CUPTI_ACTIVITY_KIND_MEMCPY) &&
      !on(CUPTI_ACTIVITY_KIND_MEMSET))
    return 0;
  const uint32_t id = ++next_correlation;
  if (on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) && !external_ids.empty())
    hold(CUpti_ActivityExternalCorrelation{CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                           CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_ids.back(), id});
  return id;
}

void ran(Op op, const char* name, size_t bytes, uint32_t stream, uint64_t start_ns, uint64_t end_ns,
         uint32_t correlation) {
  if (correlation == 0) return;  // issued while nothing was enabled
  std::lock_guard<std::mutex> lock(mutex);
  switch (op) {
    case Op::kernel:
      if (on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL))
        hold(CUpti_ActivityKernel10{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, start_ns, end_ns, 0, stream, 1, 1, 1, 1, 1,
                                    1, correlation, name});
      break;
    case Op::memcpy:
      if (on(CUPTI_ACTIVITY_KIND_MEMCPY))
        hold(CUpti_ActivityMemcpy6{CUPTI_ACTIVITY_KIND_MEMCPY, 0, bytes, start_ns, end_ns, 0, stream, correlation});
      break;
    case Op::memset:
      if (on(CUPTI_ACTIVITY_KIND_MEMSET))
        hold(CUpti_ActivityMemset4{CUPTI_ACTIVITY_KIND_MEMSET, 0, bytes, start_ns, end_ns, 0, stream, correlation});
      break;
  }
}

}  // namespace pptrain::cupti_emu
