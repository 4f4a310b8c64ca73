// Caching device allocator. Activation slots, gradients of the dgrad/wgrad split and
// workspaces are allocated and released once per microbatch; cudaMalloc/cudaFree would
// synchronise the device every time, so released blocks go to a free list per size bucket
// and are handed out again. Blocks are returned to the driver only by empty_cache() (on an
// out-of-memory retry) and at destruction.
//
// Every allocation is zero-filled (the Ops::allocate contract) with cudaMemsetAsync on the
// compute stream. All kernels run on that stream, so a block released and handed out again
// is never touched by work queued before its release.
#pragma once
#include <cstddef>
#include <map>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_api.h"

namespace pptrain::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(cudaStream_t stream) : stream_(stream) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes);  // zero-filled; nullptr for 0 bytes
  void release(void* p);         // p from allocate(), or nullptr
  void empty_cache();            // cudaFree every cached (released) block

  // The size class of a request: 512 bytes at least, above that rounded up to a quarter
  // of its power of two (≤ 25% waste, few distinct classes).
  static size_t bucket_size(size_t bytes);

  // In bucket sizes: in use, its most since construction or reset_peak(), and cached
  // (released, kept for reuse); reserved from the driver = in use + cached.
  size_t bytes_in_use() const { return bytes_in_use_; }
  size_t peak_bytes_in_use() const { return peak_bytes_in_use_; }
  void reset_peak() { peak_bytes_in_use_ = bytes_in_use_; }
  size_t bytes_cached() const { return bytes_cached_; }
  size_t bytes_reserved() const { return bytes_in_use_ + bytes_cached_; }
  size_t device_allocations() const { return device_allocations_; }  // cudaMalloc calls so far

 private:
  cudaStream_t stream_;
  std::map<size_t, std::vector<void*>> free_;   // bucket size -> cached blocks
  std::unordered_map<void*, size_t> in_use_;     // block -> bucket size
  size_t bytes_in_use_ = 0, peak_bytes_in_use_ = 0, bytes_cached_ = 0, device_allocations_ = 0;
};

}  // namespace pptrain::cuda
