// An outside CUPTI activity tracer, preloaded into a process as third-party ones are
// (LD_PRELOAD=build/bench/libcupti_preload.so; built with CUDA=1): before main it loads
// CUPTI (dlopen, as pptrain's own kernel recorder does) and records kernel activity; at exit
// it prints, on stderr, how many kernel records CUPTI delivered. scripts/gpu_check.sh runs
// pptrain under it ("outside_profiler"): a single pptrain started without mpirun must make
// its steps as it does without the tracer (an Open MPI singleton forks its daemon at
// MPI_Init with the process's environment: src/parallel/mpi_session.cpp keeps LD_PRELOAD
// from it), and the tracer must see its kernels.
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<unsigned long> kernels{0};
CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 4 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  if (!*buffer) *size = 0;
  *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (next_record(buffer, valid, &record) == CUPTI_SUCCESS)
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ++kernels;
  std::free(buffer);
}

// The count at exit. CUPTI delivers the last buffers itself when the CUDA context goes
// (before this runs); nothing here calls into CUDA or CUPTI again.
void report() { std::fprintf(stderr, "cupti_preload: %lu kernel records\n", kernels.load()); }

__attribute__((constructor)) void start() {
  void* lib = nullptr;
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
  if (!lib) {
    std::fprintf(stderr, "cupti_preload: cannot load libcupti: %s\n", dlerror());
    return;
  }
  using Register = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  using Enable = CUptiResult (*)(CUpti_ActivityKind);
  auto reg = reinterpret_cast<Register>(dlsym(lib, "cuptiActivityRegisterCallbacks"));
  auto enable = reinterpret_cast<Enable>(dlsym(lib, "cuptiActivityEnable"));
  next_record = reinterpret_cast<decltype(next_record)>(dlsym(lib, "cuptiActivityGetNextRecord"));
  if (!reg || !enable || !next_record || reg(requested, completed) != CUPTI_SUCCESS ||
      enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_preload: CUPTI refused the activity subscription\n");
    return;
  }
  std::atexit(report);
}

}  // namespace
