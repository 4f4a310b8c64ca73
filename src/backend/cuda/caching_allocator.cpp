#include "backend/cuda/caching_allocator.h"

#include <algorithm>
#include <bit>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace pptrain::cuda {

size_t CachingAllocator::bucket_size(size_t bytes) {
  constexpr size_t kMin = 512;
  if (bytes <= kMin) return kMin;
  size_t power = std::bit_floor(bytes);
  size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = bucket_size(bytes);
  void* p = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    bytes_cached_ -= size;
  } else {
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      // Cached blocks of other sizes may be what is missing: return them and retry once.
      (void)cudaGetLastError();  // clear the sticky out-of-memory status
      empty_cache();
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess)
      fail("cudaMalloc failed on ", where(), ": ", cudaGetErrorString(err), " (", size, " bytes, ",
           bytes_in_use_, " bytes in use)");
    ++device_allocations_;
  }
  in_use_.emplace(p, size);
  bytes_in_use_ += size;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  PPTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, size, stream_));
  return p;
}

void CachingAllocator::release(void* p) {
  if (!p) return;
  auto it = in_use_.find(p);
  PPTRAIN_CHECK(it != in_use_.end(), "release of a pointer this allocator did not hand out");
  const size_t size = it->second;
  in_use_.erase(it);
  bytes_in_use_ -= size;
  free_[size].push_back(p);
  bytes_cached_ += size;
}

void CachingAllocator::empty_cache() {
  // cudaFree waits for the device, so no queued work still uses a freed block.
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) PPTRAIN_CUDA_CHECK(cudaFree(p));
  free_.clear();
  bytes_cached_ = 0;
}

CachingAllocator::~CachingAllocator() {
  // No throwing from a destructor: a failing cudaFree at teardown leaks nothing we can fix.
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) (void)cudaFree(p);
  for (auto& [p, size] : in_use_) (void)cudaFree(p);
}

}  // namespace pptrain::cuda
