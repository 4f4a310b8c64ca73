// The cuda backend's kernel recorder (Ops::make_kernel_recorder, logging.kernel_profile):
// CUPTI's activity records of every kernel, copy and fill, and an external correlation id
// per op call (pushed at begin_call, popped at end_call), which CUPTI ties to the launches
// made in between. libcupti is opened at run time (dlopen), so pptrain starts on a node
// without it and only logging.kernel_profile needs it (one line if it is missing); the
// emulated build takes emu/cupti_emu.h's functions instead, whose records come from the
// emulated runtime's launches.
//
// CUPTI's activity API is per process: one recorder at a time. Its buffers are handed out
// by request_buffer and come back full in buffer_done (on CUPTI's own thread, or within
// cuptiActivityFlushAll): the records are copied out there and the buffer freed.
#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

#ifdef PPTRAIN_EMULATED
#include "emu/cupti_emu.h"
#else
#include <cupti.h>
#include <dlfcn.h>
#endif

namespace pptrain::cuda {

namespace {

// The entry points used, from libcupti (dlopen) or the emulation.
struct CuptiApi {
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*push_external)(CUpti_ExternalCorrelationKind, uint64_t);
  CUptiResult (*pop_external)(CUpti_ExternalCorrelationKind, uint64_t*);
  CUptiResult (*result_string)(CUptiResult, const char**);
};

const CuptiApi& cupti() {
#ifdef PPTRAIN_EMULATED
  static const CuptiApi api{cuptiActivityEnable,
                            cuptiActivityDisable,
                            cuptiActivityRegisterCallbacks,
                            cuptiActivityFlushAll,
                            cuptiActivityGetNextRecord,
                            cuptiActivityPushExternalCorrelationId,
                            cuptiActivityPopExternalCorrelationId,
                            cuptiGetResultString};
  return api;
#else
  static const CuptiApi api = [] {
    void* lib = nullptr;
    for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
    if (!lib)
      fail("logging.kernel_profile: cannot load libcupti (libcupti.so.13: ", dlerror(),
           "); add the CUDA toolkit's CUPTI (extras/CUPTI/lib64, or a pip wheel's nvidia/cu13/lib) to "
           "LD_LIBRARY_PATH");
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) fail("logging.kernel_profile: libcupti has no ", name);
      return p;
    };
    CuptiApi a;
    a.enable = reinterpret_cast<decltype(a.enable)>(sym("cuptiActivityEnable"));
    a.disable = reinterpret_cast<decltype(a.disable)>(sym("cuptiActivityDisable"));
    a.register_callbacks = reinterpret_cast<decltype(a.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
    a.flush_all = reinterpret_cast<decltype(a.flush_all)>(sym("cuptiActivityFlushAll"));
    a.next_record = reinterpret_cast<decltype(a.next_record)>(sym("cuptiActivityGetNextRecord"));
    a.push_external = reinterpret_cast<decltype(a.push_external)>(sym("cuptiActivityPushExternalCorrelationId"));
    a.pop_external = reinterpret_cast<decltype(a.pop_external)>(sym("cuptiActivityPopExternalCorrelationId"));
    a.result_string = reinterpret_cast<decltype(a.result_string)>(sym("cuptiGetResultString"));
    return a;
  }();
  return api;
#endif
}

// `subscribing`: the calls that fail where another profiler (nsys, ncu, a preloaded tracer)
// holds CUPTI's activity API in this process, which the line then says.
void check(CUptiResult r, const char* call, bool subscribing = false) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = "unknown CUPTI error";
  cupti().result_string(r, &text);
  fail("logging.kernel_profile: ", call, " failed: ", text,
       subscribing ? " (if a profiler such as nsys or ncu is attached, it holds CUPTI: profile with one of the two)"
                   : "");
}

// One record as it came from CUPTI, before the correlation ids are resolved.
struct Raw {
  std::string name;
  uint64_t start = 0, end = 0;
  uint32_t correlation = 0;
};

// What buffer_done copied out since the last collect(), and the correlations seen.
std::mutex records_mutex;
std::vector<Raw> raw_records;
std::map<uint32_t, uint64_t> external_of;  // correlation id -> external id (op call + 1)

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kAlign = 8;  // CUPTI's activity buffers must be 8-byte aligned

// The readable name of a kernel: demangled, without its parameter list and pptrain's
// namespaces (llm.c-style short names in the table; the trace keeps them too).
std::string kernel_name(const char* mangled) {
  if (!mangled) return "?";
  std::string name = mangled;
  int status = 0;
  if (char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status)) {
    if (status == 0) name = d;
    std::free(d);
  }
  if (name.back() == ')') {  // "f<T>(int, float*)" -> "f<T>"
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  for (const std::string prefix : {"void ", "pptrain::kernels::"}) {
    for (size_t at; (at = name.find(prefix)) != std::string::npos;) name.erase(at, prefix.size());
  }
  return name;
}

void CUPTIAPI request_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_done(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(records_mutex);
  CUpti_Activity* record = nullptr;
  while (cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        raw_records.push_back({kernel_name(k->name), k->start, k->end, k->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        raw_records.push_back({"memcpy", m->start, m->end, m->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        raw_records.push_back({"memset", m->start, m->end, m->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* e = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) external_of[e->correlationId] = e->externalId;
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
bool recorder_alive = false;  // one per process

class CuptiRecorder final : public KernelRecorder {
 public:
  // CUPTI is loaded and its buffers registered now, and the activities tried once, so a
  // node without CUPTI, or a process another profiler holds, fails at start-up.
  CuptiRecorder() {
    if (recorder_alive) fail("logging.kernel_profile: a kernel recorder is already active in this process");
    check(cupti().register_callbacks(request_buffer, buffer_done), "cuptiActivityRegisterCallbacks", true);
    start();
    stop();
    recorder_alive = true;
  }
  ~CuptiRecorder() override {
    // Unchecked: a destructor must not throw, and nothing is recorded after this.
    if (started_)
      for (CUpti_ActivityKind k : kKinds) (void)cupti().disable(k);
    (void)cudaDeviceSynchronize();
    (void)cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(records_mutex);
    raw_records.clear();
    external_of.clear();
    recorder_alive = false;
  }
  void start() override {
    for (CUpti_ActivityKind k : kKinds) check(cupti().enable(k), "cuptiActivityEnable", true);
    started_ = true;
  }
  void stop() override {
    for (CUpti_ActivityKind k : kKinds) check(cupti().disable(k), "cuptiActivityDisable");
    started_ = false;
  }
  void begin_call(size_t call) override {
    check(cupti().push_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, uint64_t(call) + 1),
          "cuptiActivityPushExternalCorrelationId");
  }
  void end_call() override {
    uint64_t last = 0;
    check(cupti().pop_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
          "cuptiActivityPopExternalCorrelationId");
  }
  std::vector<KernelRecord> collect() override {
    PPTRAIN_CUDA_CHECK(cudaDeviceSynchronize());  // every record of the work issued so far exists
    check(cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::lock_guard<std::mutex> lock(records_mutex);
    std::vector<KernelRecord> out;
    out.reserve(raw_records.size());
    for (const Raw& r : raw_records) {
      auto it = external_of.find(r.correlation);
      out.push_back({r.name, double(r.start) * 1e-6, double(r.end) * 1e-6,
                     it == external_of.end() ? -1LL : (long long)(it->second) - 1});
    }
    raw_records.clear();
    external_of.clear();
    return out;
  }

 private:
  bool started_ = false;
};

}  // namespace

std::unique_ptr<KernelRecorder> CudaOps::make_kernel_recorder() { return std::make_unique<CuptiRecorder>(); }

}  // namespace pptrain::cuda
