#include "backend/cpu/host_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>

namespace pptrain::cpu {
namespace {

// The transparent huge page size the kernel uses, or 0 where it has none (no such file:
// an old kernel, another system, THP compiled out).
size_t huge_page_bytes() {
  static const size_t bytes = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    size_t b = 0;
    if (!(f >> b) || (b & (b - 1)) != 0) return size_t(0);
    return b;
  }();
  return bytes;
}

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

HostArena::HostArena(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  const size_t huge = huge_page_bytes();
  // A huge page larger than a chunk (arm64 kernels with 64 KiB pages use 512 MiB) would
  // make the smallest process hold one: there the chunks keep base pages.
  huge_ = huge != 0 && huge <= chunk_bytes_;
  if (huge_) chunk_bytes_ = round_up(chunk_bytes_, huge);
}

HostArena::~HostArena() {
  for (const Chunk& c : chunks_) munmap(c.base, c.bytes);
}

void* HostArena::map(size_t bytes) {
  const size_t align = huge_ ? huge_page_bytes() : size_t(sysconf(_SC_PAGESIZE));
  bytes = round_up(bytes, align);
  // Map `align` more than needed and unmap the ends, so the chunk starts on a huge page
  // boundary: the kernel backs only whole aligned 2 MiB ranges with a huge page.
  const size_t padded = bytes + align;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = uintptr_t(raw), aligned = round_up(start, align);
  if (aligned > start) munmap(raw, aligned - start);
  if (const uintptr_t end = start + padded, used = aligned + bytes; end > used)
    munmap(reinterpret_cast<void*>(used), end - used);
  void* base = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  // Advice only: where THP is "never" the chunk keeps base pages, and nothing fails.
  if (huge_) madvise(base, bytes, MADV_HUGEPAGE);
#endif
  chunks_.push_back({base, bytes});
  mapped_ += bytes;
  return base;
}

void* HostArena::take(size_t bytes) {
  if (bytes > left_) {
    // A quarter of a chunk or more: a mapping of its own, and the current chunk stays. So a
    // chunk is never left with more than a quarter unused, which counts against an
    // address-space limit (ulimit -v) though it is never touched.
    if (bytes >= chunk_bytes_ / 4) return map(bytes);
    // The rest of the current chunk (less than this block) is left unused.
    next_ = static_cast<char*>(map(chunk_bytes_));
    if (!next_) {
      left_ = 0;
      return nullptr;
    }
    left_ = chunks_.back().bytes;
  }
  void* p = next_;
  next_ += bytes;
  left_ -= bytes;
  return p;
}

}  // namespace pptrain::cpu
