// The cpu backend's host memory (src/backend/cpu/host_arena.h): blocks carved from
// 2 MiB-aligned chunks marked for transparent huge pages, and the backend's allocate()
// taking its new blocks there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "backend/cpu/host_arena.h"
#include "backend/ops.h"

namespace pptrain {
namespace {

using cpu::HostArena;

// The kernel's THP size, 0 where it has none (as host_arena.cpp reads it).
size_t thp_bytes() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
  size_t b = 0;
  return f >> b ? b : 0;
}

// The VmFlags of the mapping of this process that holds `p` ("" if none does).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {  // a mapping's first line
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool all_zero(const unsigned char* p, size_t n) {
  return std::all_of(p, p + n, [](unsigned char c) { return c == 0; });
}

TEST(HostArena, BlocksAreAlignedZeroedAndDisjoint) {
  HostArena arena(size_t(8) << 20);
  std::vector<std::pair<unsigned char*, size_t>> blocks;
  for (size_t bytes : {size_t(64), size_t(128), size_t(4096), size_t(1) << 20, size_t(64)}) {
    auto* p = static_cast<unsigned char*>(arena.take(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    EXPECT_TRUE(all_zero(p, bytes)) << bytes;
    std::fill(p, p + bytes, 0xCD);  // a later block overlapping this one would not be zero
    blocks.push_back({p, bytes});
  }
  for (size_t i = 0; i < blocks.size(); ++i)
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      auto [a, na] = blocks[i];
      auto [b, nb] = blocks[j];
      EXPECT_TRUE(a + na <= b || b + nb <= a) << "blocks " << i << " and " << j << " overlap";
    }
  EXPECT_EQ(arena.bytes_mapped(), size_t(8) << 20) << "all of them fit the first chunk";
}

TEST(HostArena, ALargeBlockThatDoesNotFitGetsItsOwnMappingAndTheChunkGoesOn) {
  const size_t chunk = size_t(8) << 20, quarter = chunk / 4;
  HostArena arena(chunk);
  // A mapping's rounding: the huge page, or the system's page (4 KiB on x86-64).
  const size_t align = arena.huge_pages() ? thp_bytes() : size_t(sysconf(_SC_PAGESIZE));
  auto rounded = [&](size_t bytes) { return (bytes + align - 1) / align * align; };
  auto* first = static_cast<unsigned char*>(arena.take(64));
  // Larger than a chunk: a mapping of its own; the chunk goes on.
  auto* big = static_cast<unsigned char*>(arena.take(chunk + 64));
  ASSERT_NE(big, nullptr);
  EXPECT_TRUE(all_zero(big, chunk + 64));
  size_t used = 64;
  // Blocks that fit the chunk's rest come from it, in order, up to 128 bytes short of full.
  for (size_t bytes : {quarter, quarter - 64, quarter - 64, quarter - 64}) {
    auto* p = static_cast<unsigned char*>(arena.take(bytes));
    EXPECT_EQ(p, first + used) << bytes;
    used += bytes;
  }
  ASSERT_EQ(used, chunk - 128);
  EXPECT_EQ(arena.bytes_mapped(), chunk + rounded(chunk + 64));
  // A quarter chunk does not fit the rest: its own mapping, not a new chunk, so a chunk is
  // never abandoned with more than a quarter of it unused.
  auto* q = static_cast<unsigned char*>(arena.take(quarter));
  EXPECT_TRUE(q < first || q >= first + chunk);
  EXPECT_EQ(arena.bytes_mapped(), chunk + rounded(chunk + 64) + rounded(quarter));
  auto* tail = static_cast<unsigned char*>(arena.take(128));
  EXPECT_EQ(tail, first + used) << "the chunk goes on after it";
  // A small block that does not fit starts a new chunk.
  auto* spill = static_cast<unsigned char*>(arena.take(64));
  EXPECT_TRUE(spill < first || spill >= first + chunk) << "outside the full chunk";
  EXPECT_EQ(arena.bytes_mapped(), 2 * chunk + rounded(chunk + 64) + rounded(quarter));
}

TEST(HostArena, ChunksAreHugePageAlignedAndMarkedWhereTheKernelHasThem) {
  const size_t thp = thp_bytes();
  if (thp == 0) GTEST_SKIP() << "this kernel has no transparent huge pages";
  HostArena arena(size_t(4) << 20);
  ASSERT_TRUE(arena.huge_pages());
  void* p = arena.take(64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % thp, 0u) << "a chunk starts on a huge page";
  // "hg": the mapping carries MADV_HUGEPAGE, so the kernel backs it with huge pages where
  // transparent huge pages are "madvise" (most distributions), not only where "always".
  const std::string flags = vm_flags_of(p);
  ASSERT_FALSE(flags.empty()) << "no mapping of this process holds the block";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

TEST(HostArena, TheCpuBackendTakesItsBlocksFromTheArena) {
  // What the training step gets: an activation-sized block of make_cpu_ops() lies on a
  // mapping marked for huge pages (from the C library's heap it would not be).
  if (thp_bytes() == 0) GTEST_SKIP() << "this kernel has no transparent huge pages";
  std::unique_ptr<Ops> ops = make_cpu_ops();
  void* p = ops->allocate(size_t(1) << 20);
  const std::string flags = vm_flags_of(p);
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  ops->release(p);
}

}  // namespace
}  // namespace pptrain
