// Host memory for the cpu backend: 64-byte aligned (one cache line, one AVX-512
// vector), zero-filled; copies (and casts, fp32 to fp32) are memcpy.
//
// New blocks come from the arena (host_arena.h: chunks on transparent huge pages).
// Released blocks are kept for reuse by size (rounded to the alignment) rather than given
// back: activation slots are taken and released every microbatch, and
// large blocks freed to the system come back as fresh pages that fault in one by one on
// first touch. That cost depended on the heap's state (the C library trims and maps large
// blocks by thresholds of its own), so the same layer ran up to 1.4x slower timed alone
// by `pptrain profile` than inside a step. With the cache, every step after the first,
// and every repetition of the profile after its first, reuses the same blocks.
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "core/error.h"
#include "backend/cpu/isa_begin.h"  // last: see there
#include "backend/cpu/simd.h"  // after it: its vectors are this file's ISA's

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

// This instruction set's copy of the backend (cpu_isa.cpp chooses).
std::unique_ptr<Ops> make_ops(const Faults& faults) { return std::make_unique<CpuOps>(faults); }

namespace {
constexpr size_t kAlignment = 64;
size_t round_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

float* ScratchArray::reserve(size_t n) {
  if (n > capacity_) {
    size_t bytes = round_up(n * sizeof(float));
    float* p = static_cast<float*>(std::aligned_alloc(kAlignment, bytes));
    if (!p) fail("cpu backend: cannot allocate ", bytes, " bytes of scratch memory");
    data_.reset(p);
    capacity_ = n;
  }
  return data_.get();
}

void CpuOps::reserve_thread_scratch(size_t floats_per_thread) {
  size_t threads = size_t(omp_get_max_threads());
  if (thread_scratch_.size() < threads) thread_scratch_.resize(threads);
  for (size_t i = 0; i < threads; ++i) thread_scratch_[i].reserve(floats_per_thread);
}

void* CpuOps::allocate(size_t bytes) {
  size_t rounded = round_up(bytes ? bytes : 1);  // aligned_alloc needs a multiple of the alignment
  void* p = nullptr;
  if (auto it = cached_.find(rounded); it != cached_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    bytes_cached_ -= rounded;
    std::memset(p, 0, rounded);
  } else {
    p = arena_.take(rounded);  // fresh pages of an anonymous mapping: zero already
    if (!p) fail("cpu backend: cannot allocate ", bytes, " bytes of host memory");
  }
  live_blocks_.emplace(p, bytes);
  bytes_in_use_ += bytes;
  bytes_reserved_ += rounded;
  peak_bytes_ = std::max(peak_bytes_, bytes_in_use_);
  return p;
}

void CpuOps::release(void* p) {
  if (!p) return;
  auto it = live_blocks_.find(p);
  PPTRAIN_CHECK(it != live_blocks_.end(), "cpu backend: release of a pointer allocate() did not hand out");
  // Planted fault uncounted_release: the first release leaves its bytes counted in use.
  if (uncounted_release_) uncounted_release_ = false;
  else bytes_in_use_ -= it->second;
  const size_t rounded = round_up(it->second ? it->second : 1);
  bytes_reserved_ -= rounded;
  live_blocks_.erase(it);
  cached_[rounded].push_back(p);
  bytes_cached_ += rounded;
}

MemoryStats CpuOps::memory_stats() const {
  // Outside the allocator: the per-thread attention tiles and the packed weight copies.
  size_t outside = packed_ ? packed_->packed_bytes() : 0;
  for (const ScratchArray& scratch : thread_scratch_) outside += scratch.bytes();
  return {bytes_in_use_, peak_bytes_, bytes_reserved_ + bytes_cached_, outside};
}

void CpuOps::copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuOps::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuOps::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

namespace {
// The last level cache's bytes as the C library reports them (L3, else L2; 0 if neither).
size_t last_level_cache_bytes() {
  static const size_t bytes = [] {
    for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
      if (const long b = sysconf(name); b > 0) return size_t(b);
    return size_t(0);
  }();
  return bytes;
}
}  // namespace

// The gradients are zeroed once a step, all of them at once (GPT-2 124M: 472 MiB). One
// thread's memset wrote that at 9.9 GB/s (`logging.op_profile`, an Emerald Rapids VM):
// 5.7% of the step. The threads each zero a share. Past a quarter of the last level cache,
// where the lines would be pushed out long before a weight gradient reads them, they zero
// with streaming stores, which skip reading each line before writing it. Measured there,
// both threads, L3 260 MiB: a plain memset 52-54 GB/s up to 64 MiB when it zeroes the same
// lines again (in cache) and 17.6-21 GB/s at 128 and 472 MiB, streaming stores 46-47 GB/s.
// With the buffer written first and other memory swept in between, as in a step, memset
// and streaming stores ran even at 64 MiB with no other traffic (22.5 and 23.6 GB/s) and at
// 32 MiB with 256 MiB of it (25.3 and 28.7), and streaming won from 96 MiB on (29.6-39.3
// against 18.4-18.5): a quarter of the cache, 65 MiB here, sits at the first crossover.
void CpuOps::zero(void* p, size_t bytes) {
  if (bytes < kParallelMinElements * sizeof(float)) {
    if (bytes) std::memset(p, 0, bytes);
    return;
  }
  const size_t cache = last_level_cache_bytes();
  const bool stream = cache > 0 && bytes >= cache / 4;
  auto* begin = static_cast<char*>(p);
  // Whole chunks of 64 KiB from the first 64-byte boundary on (a streaming store needs an
  // aligned vector); the edges go to memset.
  constexpr size_t kChunk = size_t(1) << 16;
  char* aligned = begin + (kAlignment - reinterpret_cast<uintptr_t>(begin) % kAlignment) % kAlignment;
  const size_t chunks = size_t(begin + bytes - aligned) / kChunk;
  char* end = aligned + chunks * kChunk;
  std::memset(begin, 0, size_t(aligned - begin));
  std::memset(end, 0, size_t(begin + bytes - end));
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (long long c = 0; c < (long long)chunks; ++c) {
      float* chunk = reinterpret_cast<float*>(aligned + size_t(c) * kChunk);
      if (!stream) {
        std::memset(chunk, 0, kChunk);
        continue;
      }
      const simd::Vec zeros = simd::splat(0.0f);
      for (size_t i = 0; i < kChunk / sizeof(float); i += simd::kWidth) simd::stream(chunk + i, zeros);
    }
    // Streaming stores are weakly ordered: each thread fences its own before the region's
    // closing barrier, after which any thread may read the zeros.
    if (stream) simd::store_fence();
  }
}

void CpuOps::cast(View dstv, ConstView srcv, size_t n) {
  // fp32 only, so a cast is a copy.
  float *dst; const float *src;
  std::tie(dst, src) = fp32("cast", dstv, srcv);
  if (n) std::memcpy(dst, src, n * sizeof(float));
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
