// Host memory for the cpu backend's tensors, taken from large chunks that the kernel may
// back with transparent huge pages.
//
// Why: a training step reads back activations written long before (ZB-V's I and W run
// microbatches after their F), from a working set far larger than the caches and than
// what the TLB covers with 4 KiB pages (Zen 4's L2 TLB: 3,072 entries, 12 MiB). Every
// page of such a read is a TLB miss, and in a virtual machine a miss walks two page
// tables. Most distributions set transparent huge pages to "madvise", so memory from
// the C library's heap stays on 4 KiB pages. Chunks here are mapped 2 MiB-aligned and
// marked MADV_HUGEPAGE. Measured: pp 2 ZB-V on a 2-vCPU Zen 4 VM, 470-478 ms a step
// against 476-491 ms from the heap (docs/PERFORMANCE.md).
//
// Blocks are carved from the current chunk in order and never given back one by one (the
// backend keeps released blocks for reuse by size, memory.cpp); the chunks are unmapped
// when the arena goes. A block of a quarter chunk or more gets a mapping of its own size.
#pragma once
#include <cstddef>
#include <vector>

namespace pptrain::cpu {

class HostArena {
 public:
  // chunk_bytes: the size of each mapping (rounded up to the huge page size).
  explicit HostArena(size_t chunk_bytes = size_t(32) << 20);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // `bytes` (a multiple of 64) of memory aligned to 64 bytes, or nullptr when the system
  // has no more. Its contents are zero the first time, unspecified when reused.
  void* take(size_t bytes);
  // Bytes mapped from the system, handed out or not.
  size_t bytes_mapped() const { return mapped_; }
  // Whether chunks are marked for huge pages (false where the kernel has none).
  bool huge_pages() const { return huge_; }

 private:
  struct Chunk {
    void* base;
    size_t bytes;
  };
  std::vector<Chunk> chunks_;
  size_t chunk_bytes_;
  char* next_ = nullptr;  // the rest of the newest chunk
  size_t left_ = 0;
  size_t mapped_ = 0;
  bool huge_ = false;
  void* map(size_t bytes);  // a 2 MiB-aligned mapping, recorded in chunks_
};

}  // namespace pptrain::cpu
