// The SIMT emulator's runner of one kernel launch (see emu.h for the execution model).
//
// One BlockRunner per launch. It owns one fiber per thread of a block (stacks come from a
// per-OS-thread pool and are reused across blocks and launches) and a scheduler loop that
// takes the warps in order (or reverse) and runs each warp as far as it gets: its runnable
// lanes in lane order (or reverse), each until it reaches a synchronisation point or exits,
// again and again until every lane of the warp waits at `__syncthreads` or exited. A fiber
// in a warp collective becomes runnable when the last lane of its mask arrives, which also
// computes every lane's result; a fiber waiting at `__syncthreads` becomes runnable again
// only when every thread of the block waits there. When nothing is runnable and the block
// has not finished, it is deadlocked and the launch fails with a description of who waits
// where.
//
// block_runner.cpp: the scheduler, the fibers, warp collectives, shared memory.
// block_async.cpp: the asynchronous operations (warpgroup products, mbarriers, bulk tensor
// copies, cp.async) and the checks that catch races on them.
// emu.cpp: the launch and the device-side entry points (emu.h's detail functions), which
// reach the running launch through `g_active`.
// The fibers themselves (stacks, context switch) are in fiber.h.
#pragma once
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "emu/emu.h"
#include "emu/fiber.h"

namespace pptrain::emu::runner {

inline constexpr size_t kMaxStaticSharedBytes = 48 * 1024;  // a GPU's limit for static shared memory
inline constexpr unsigned char kPoisonByte = 0xFF;  // 0xFFFFFFFF is a NaN as float, -1 as int

enum class Wait { runnable, block_barrier, warp, warpgroup, mbarrier, wgmma_wait, exited };

// One cp.async: copied when its group completes (or at issue; see ptx_emu.h).
struct AsyncCopy {
  void* dst;
  const void* src;
  size_t bytes, src_bytes;
  void run() const {
    std::memcpy(dst, src, src_bytes);
    std::memset(static_cast<char*>(dst) + src_bytes, 0, bytes - src_bytes);
  }
};

struct Fiber {
  FiberContext context;
  // wgmma.mma_async operations (ptx_emu.h) issued since the last wgmma.commit_group, and the
  // committed groups not yet waited for, oldest first. Shared by the warpgroup's 128 lanes.
  std::vector<std::shared_ptr<detail::AsyncMatrixOp>> open_wgmma;
  std::vector<std::vector<std::shared_ptr<detail::AsyncMatrixOp>>> wgmma_groups;
  std::vector<AsyncCopy> open_group;               // cp.async issued since the last commit
  std::vector<std::vector<AsyncCopy>> groups;      // committed, not yet complete, oldest first
  uint3 index;
  Wait wait = Wait::runnable;
  const void* waiting_bar = nullptr;  // Wait::mbarrier: the barrier and the phase parity awaited
  int waiting_parity = 0;
  const char* waiting_at = "";
  unsigned waiting_mask = 0;
};

// A warp collective that some lanes of `mask` have reached; it completes when all of them
// have. A lane waits in at most one group, but groups may overlap: lanes 16-31 can wait in
// a full-mask __syncwarp while lanes 0-15 run their own 0xffff shuffles. A lane arriving
// with a mask joins the pending group of that mask, as the *_sync intrinsics match by mask.
struct WarpGroup {
  unsigned mask, arrived;
  detail::WarpOp op;
  const char* name;
  detail::MatrixRun run;  // WarpOp::matrix only
};

struct Warp {
  std::vector<WarpGroup> pending;
  uint64_t value[32];   // deposited by each lane
  int arg[32];          // source lane / delta / xor mask of each lane
  int width[32];
  uint64_t result[32];  // filled for every lane when its group completes
};

class BlockRunner;
extern thread_local BlockRunner* g_active;  // the launch running on this OS thread

class BlockRunner {
 public:
  BlockRunner(Stream& stream, const char* name, dim3 grid, dim3 block, size_t dynamic_bytes,
              KernelBody body);
  void run_grid();

  // ---- called from inside fibers (block_runner.cpp) ----
  void sync_block();
  uint64_t warp_collective(detail::WarpOp op, const char* name, unsigned mask, uint64_t value, int arg,
                           int width, detail::MatrixRun run = nullptr);
  void* dynamic_shared() { return dynamic_.data(); }
  size_t dynamic_bytes() const { return dynamic_bytes_; }
  void* static_shared(const void* tag, size_t bytes, const char* name);
  bool in_shared(const void* p, size_t bytes) const;
  [[noreturn]] void fault(const std::string& what);
  bool in_fiber() const { return current_ >= 0; }

  // ---- the asynchronous operations (block_async.cpp) ----
  void warpgroup_collective(const char* name, const void* operands, size_t bytes, detail::MatrixRun run, bool async,
                            detail::MatrixReads reads);
  void async_matrix_commit();
  void async_matrix_wait(int pending);
  void mbarrier_init(void* bar, int count);
  void mbarrier_arrive(void* bar, long long expect_tx);
  void mbarrier_wait(void* bar, int parity);
  void bulk_copy(void* bar, void* dst, long long bytes, std::function<void()> copy);
  void async_copy(const AsyncCopy& c);
  void async_commit();
  void async_wait(int pending);

 private:
  struct Mbarrier {
    int count = 0, pending = 0, phase = 0;
    long long tx = 0;
  };

  // block_runner.cpp
  void run_block();
  static void prepare_fiber(Fiber& f, const FiberStack& stack, int k);
  void complete(Warp& w, const WarpGroup& g, int warp_base);
  std::string describe_waits() const;
  std::string shared_string(const void* p) const;
  void resume(int k);
  void yield();
  [[noreturn]] static void fiber_main();

  // block_async.cpp
  Mbarrier& mbarrier_at(const void* bar, const char* what);
  void mbarrier_update(const void* bar, Mbarrier& m, int arrivals, long long tx);
  bool wake_wgmma_waits();
  bool complete_bulk_copies();
  void complete(detail::AsyncMatrixOp& op);
  void check_unread(const void* dst, size_t bytes, const char* what);

  template <typename... A>
  static std::string cat(const A&... a) {
    std::ostringstream s;
    (s << ... << a);
    return s.str();
  }
  static std::string hex(unsigned v) { return cat("0x", std::hex, v); }
  static std::string block_string(uint3 b) { return cat("(", b.x, ",", b.y, ",", b.z, ")"); }

  Stream& stream_;
  const char* name_;
  dim3 grid_, block_;
  KernelBody body_;
  uint3 block_index_{0, 0, 0};
  std::vector<Fiber> fibers_;
  std::vector<Warp> warps_;
  struct alignas(16) Chunk { unsigned char bytes[16]; };
  std::vector<Chunk> dynamic_;
  // Static shared declarations met so far in this launch; the storage does not move.
  struct StaticRegion {
    const void* tag;
    std::unique_ptr<Chunk[]> data;
    size_t bytes;
  };
  std::vector<StaticRegion> statics_;
  struct WarpgroupState {
    int arrived = 0;
    const char* name = "";
    detail::MatrixRun run = nullptr;
    const void* operands[128];
    size_t bytes = 0;
    std::shared_ptr<detail::AsyncMatrixOp> last;  // the operation the arrivals just issued
  };
  std::vector<WarpgroupState> warpgroups_;
  std::map<const void*, Mbarrier> mbarriers_;
  struct BulkCopy {
    void* bar;
    long long bytes;
    std::function<void()> copy;
  };
  std::vector<BulkCopy> bulk_;
  std::vector<std::shared_ptr<detail::AsyncMatrixOp>> in_flight_;  // issued wgmma, maybe done
  size_t dynamic_bytes_ = 0;
  FiberContext scheduler_;
  int current_ = -1;
  std::exception_ptr fault_;
};

}  // namespace pptrain::emu::runner
