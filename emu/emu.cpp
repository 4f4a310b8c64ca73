// SIMT emulator: runs one kernel launch on the CPU. See emu.h for the execution model.
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
// The fibers themselves (stacks, context switch) are in fiber.h.
#include "emu/emu.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "emu/fiber.h"


namespace pptrain::emu {
namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxStaticSharedBytes = 48 * 1024;  // a GPU's limit for static shared memory
constexpr unsigned char kPoisonByte = 0xFF;  // 0xFFFFFFFF is a NaN as float, -1 as int



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

using detail::WarpOp;

class BlockRunner;
thread_local BlockRunner* g_active = nullptr;           // the launch running on this OS thread
thread_local std::vector<FiberStack> g_stack_pool;      // reused across launches

class BlockRunner {
 public:
  BlockRunner(Stream& stream, const char* name, dim3 grid, dim3 block, size_t dynamic_bytes,
              KernelBody body)
      : stream_(stream), name_(name), grid_(grid), block_(block), body_(body) {
    unsigned n = block.x * block.y * block.z;
    while (g_stack_pool.size() < n) g_stack_pool.emplace_back();
    fibers_.resize(n);
    for (unsigned k = 0; k < n; ++k)
      fibers_[k].index = {k % block.x, (k / block.x) % block.y, k / (block.x * block.y)};
    warps_.resize((n + 31) / 32);
    warpgroups_.resize((n + 127) / 128);
    // 16-byte aligned, as the start of dynamic shared memory is on a GPU.
    dynamic_.resize((dynamic_bytes + 15) / 16 + 1);
    dynamic_bytes_ = dynamic_bytes;
  }

  void run_grid() {
    blockDim = block_;
    gridDim = grid_;
    size_t blocks = size_t(grid_.x) * grid_.y * grid_.z;
    bool reverse = stream_.order == Order::reverse;
    for (size_t i = 0; i < blocks; ++i) {
      size_t b = reverse ? blocks - 1 - i : i;
      block_index_ = {unsigned(b % grid_.x), unsigned((b / grid_.x) % grid_.y),
                      unsigned(b / (size_t(grid_.x) * grid_.y))};
      run_block();
      ++stream_.blocks;
    }
  }

  // ---- called from inside fibers ----
  void sync_block() {
    Fiber& f = fibers_[current_];
    f.wait = Wait::block_barrier;
    f.waiting_at = "__syncthreads";
    yield();
  }

  uint64_t warp_collective(WarpOp op, const char* name, unsigned mask, uint64_t value, int arg,
                           int width, detail::MatrixRun run = nullptr) {
    int lane = current_ % 32;
    Warp& w = warps_[current_ / 32];
    unsigned bit = 1u << lane;
    int lanes = std::min(32, int(fibers_.size()) - (current_ / 32) * 32);
    unsigned existing = lanes == 32 ? ~0u : (1u << lanes) - 1;
    if (!(mask & bit)) fault(cat(name, " with mask ", hex(mask), " that excludes the calling lane"));
    if (mask & ~existing)
      fault(cat(name, " with mask ", hex(mask), " naming lanes that do not exist (the warp has ",
                lanes, " threads)"));
    if (width < 1 || width > 32 || (width & (width - 1)))
      fault(cat(name, " with width ", width, " (must be a power of two <= 32)"));
    size_t g = 0;
    while (g < w.pending.size() && w.pending[g].mask != mask) ++g;
    if (g == w.pending.size()) w.pending.push_back({mask, 0u, op, name, run});
    if (w.pending[g].op != op || w.pending[g].run != run)
      fault(cat("lanes of mask ", hex(mask), " disagree: this lane is at ", name,
                ", others at ", w.pending[g].name));
    w.value[lane] = value;
    w.arg[lane] = arg;
    w.width[lane] = width;
    w.pending[g].arrived |= bit;
    Fiber& f = fibers_[current_];
    f.wait = Wait::warp;
    f.waiting_at = name;
    f.waiting_mask = mask;
    if (w.pending[g].arrived == mask) {
      complete(w, w.pending[g], current_ - lane);
      w.pending.erase(w.pending.begin() + long(g));
    }
    yield();
    return w.result[lane];
  }

  void* dynamic_shared() { return dynamic_.data(); }

  // A warpgroup-wide operation: all 128 threads of the calling thread's warpgroup arrive
  // (the block's threads must be a multiple of 128), then `run` runs once with every lane's
  // operands, on the last arriving thread. With `async`, run is wrapped in an operation that
  // completes at the thread's wgmma.wait_group (see async_matrix_wait) or, in forward order,
  // at once: the two extremes a GPU allows.
  void warpgroup_collective(const char* name, const void* operands, size_t bytes, detail::MatrixRun run, bool async,
                            detail::MatrixReads reads) {
    int group = current_ / 128, lane = current_ % 128;
    if (size_t(group + 1) * 128 > fibers_.size())
      fault(cat(name, " by a thread of an incomplete warpgroup (", fibers_.size(), " threads in the block)"));
    WarpgroupState& g = warpgroups_[group];
    if (g.arrived == 0) g.name = name, g.run = run;
    else if (g.run != run)
      fault(cat("the threads of warpgroup ", group, " disagree: this one is at ", name, ", others at ", g.name));
    g.operands[lane] = operands;
    g.bytes = bytes;
    ++g.arrived;
    Fiber& f = fibers_[current_];
    if (g.arrived < 128) {
      f.wait = Wait::warpgroup;
      f.waiting_at = name;
      yield();
    } else {
      auto op = std::make_shared<detail::AsyncMatrixOp>();
      op->run = run;
      op->operands.resize(128 * bytes);
      for (int l = 0; l < 128; ++l) {
        std::memcpy(op->operands.data() + l * bytes, g.operands[l], bytes);
        op->lanes[l] = op->operands.data() + l * bytes;
      }
      op->warpgroup = group;
      if (reads) {
        reads(op->lanes[0], op->reads);
        op->at_issue.resize(2 * op->reads.size());
        for (size_t e = 0; e < op->reads.size(); ++e) std::memcpy(&op->at_issue[2 * e], op->reads[e], 2);
      }
      if (!async || stream_.order == Order::forward) complete(*op);
      else in_flight_.push_back(op);
      g.last = op;
      g.arrived = 0;
      for (int k = group * 128; k < group * 128 + 128; ++k)
        if (k != current_) fibers_[k].wait = Wait::runnable;
    }
    if (async) f.open_wgmma.push_back(g.last);
  }
  // ---- mbarrier and bulk copies (ptx_emu.h) ----
  struct Mbarrier {
    int count = 0, pending = 0, phase = 0;
    long long tx = 0;
  };
  Mbarrier& mbarrier_at(const void* bar, const char* what) {
    auto it = mbarriers_.find(bar);
    if (it == mbarriers_.end()) fault(cat(what, " on an mbarrier that was not initialised in this block"));
    return it->second;
  }
  void mbarrier_init(void* bar, int count) {
    if (!in_shared(bar, 8) || reinterpret_cast<uintptr_t>(bar) % 8) fault("mbarrier.init: not 8-byte aligned shared memory");
    if (count < 1 || count > (1 << 20) - 1) fault(cat("mbarrier.init with count ", count));
    Mbarrier m;
    m.count = m.pending = count;
    mbarriers_[bar] = m;
  }
  void mbarrier_update(const void* bar, Mbarrier& m, int arrivals, long long tx) {
    m.tx += tx;
    m.pending -= arrivals;
    if (m.pending < 0) fault(cat("mbarrier: ", m.count - m.pending, " arrivals in a phase of ", m.count));
    if (m.pending > 0 || m.tx != 0) return;
    m.phase ^= 1;
    m.pending = m.count;
    for (Fiber& f : fibers_)
      if (f.wait == Wait::mbarrier && f.waiting_bar == bar && f.waiting_parity != m.phase) f.wait = Wait::runnable;
  }
  void mbarrier_arrive(void* bar, long long expect_tx) {
    mbarrier_update(bar, mbarrier_at(bar, "mbarrier.arrive"), 1, expect_tx);
  }
  // "The phase of parity p has completed": the current phase's parity is no longer p.
  void mbarrier_wait(void* bar, int parity) {
    Fiber& f = fibers_[current_];
    while (mbarrier_at(bar, "mbarrier.try_wait").phase == parity) {
      f.wait = Wait::mbarrier;
      f.waiting_bar = bar;
      f.waiting_parity = parity;
      f.waiting_at = "mbarrier.try_wait";
      yield();
    }
  }
  void bulk_copy(void* bar, void* dst, long long bytes, std::function<void()> copy) {
    mbarrier_at(bar, "cp.async.bulk");
    check_unread(dst, size_t(bytes), "cp.async.bulk.tensor");
    if (stream_.order == Order::forward) {
      copy();
      mbarrier_update(bar, mbarriers_[bar], 0, -bytes);
    } else {
      bulk_.push_back({bar, bytes, std::move(copy)});
    }
  }
  // Threads held at a wgmma.wait_group (reverse order) continue once no other thread can run.
  bool wake_wgmma_waits() {
    bool any = false;
    for (Fiber& f : fibers_)
      if (f.wait == Wait::wgmma_wait) f.wait = Wait::runnable, any = true;
    return any;
  }
  // Completes held-back bulk copies (reverse order) when no thread can run: only those on
  // barriers a thread is waiting for (a copy another barrier covers stays in flight, so a
  // read that forgot its own barrier sees the poison), else all of them. False if none.
  bool complete_bulk_copies() {
    if (bulk_.empty()) return false;
    auto awaited = [&](const void* bar) {
      for (const Fiber& f : fibers_)
        if (f.wait == Wait::mbarrier && f.waiting_bar == bar) return true;
      return false;
    };
    bool any = false;
    for (const BulkCopy& c : bulk_) any = any || awaited(c.bar);
    std::vector<BulkCopy> now, later;
    for (BulkCopy& c : bulk_) (!any || awaited(c.bar) ? now : later).push_back(std::move(c));
    bulk_ = std::move(later);
    for (BulkCopy& c : now) {
      c.copy();
      mbarrier_update(c.bar, mbarriers_[c.bar], 0, -c.bytes);
    }
    return true;
  }

  void async_matrix_commit() {
    Fiber& f = fibers_[current_];
    f.wgmma_groups.push_back(std::move(f.open_wgmma));
    f.open_wgmma.clear();
  }
  // In reverse order a wait that has to complete a product first lets every other thread run
  // (Wait::wgmma_wait is woken only when nothing else can run), so that what they do while
  // the product is in flight -- a stage released too early and refilled, a plain store into
  // an operand -- happens before it reads its operands, and is caught (check_unread, complete).
  void async_matrix_wait(int pending) {
    Fiber& f = fibers_[current_];
    if (pending < 0) fault(cat("wgmma.wait_group ", pending));
    auto must_complete = [&] {
      for (size_t g = 0; g + size_t(pending) < f.wgmma_groups.size(); ++g)
        for (auto& op : f.wgmma_groups[g])
          if (!op->done) return true;
      return false;
    };
    if (stream_.order == Order::reverse && must_complete()) {
      f.wait = Wait::wgmma_wait;
      f.waiting_at = "wgmma.wait_group";
      yield();
    }
    while (f.wgmma_groups.size() > size_t(pending)) {
      for (auto& op : f.wgmma_groups.front()) complete(*op);
      f.wgmma_groups.erase(f.wgmma_groups.begin());
    }
  }

  // Runs an operation once. A shared element it reads that changed since its issue was
  // written while it was in flight: on a GPU it may have read either value.
  void complete(detail::AsyncMatrixOp& op) {
    if (op.done) return;
    for (size_t e = 0; e < op.reads.size(); ++e)
      if (std::memcmp(&op.at_issue[2 * e], op.reads[e], 2) != 0)
        fault(cat("shared memory at ", shared_string(op.reads[e]), ", read by a wgmma of warpgroup ", op.warpgroup,
                  ", was written after the wgmma was issued and before a wgmma.wait_group covered it (a race: "
                  "the product may read either value)"));
    op.run(op.lanes);
    op.done = true;
  }

  // A write of [dst, dst + bytes) issued now must not touch what an issued, not yet completed
  // wgmma reads: it may land before the product reads it (a stage released before the wait
  // for the product that reads it, then refilled).
  void check_unread(const void* dst, size_t bytes, const char* what) {
    if (in_flight_.empty()) return;
    auto* lo = static_cast<const unsigned char*>(dst);
    std::erase_if(in_flight_, [](const auto& op) { return op->done; });
    for (const auto& op : in_flight_)
      for (const unsigned char* e : op->reads)
        if (e + 2 > lo && e < lo + bytes)
          fault(cat(what, " into shared memory at ", shared_string(e), " that a wgmma of warpgroup ", op->warpgroup,
                    " reads and no wgmma.wait_group has covered yet (a race: the write may land before the product "
                    "reads; wait for the product before releasing what it reads)"));
  }
  // "dynamic shared byte 4096" (offset from the start of dynamic shared memory) or a pointer.
  std::string shared_string(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(dynamic_.data());
    if (a >= b && a < b + dynamic_bytes_) return cat("dynamic shared byte ", a - b);
    return cat("address ", p);
  }

  bool in_shared(const void* p, size_t bytes) const {
    auto in = [&](const void* lo, size_t n) {
      auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(lo);
      return a >= b && a + bytes <= b + n;
    };
    if (in(dynamic_.data(), dynamic_bytes_)) return true;
    for (const StaticRegion& r : statics_)
      if (in(r.data.get(), r.bytes)) return true;
    return false;
  }

  void* static_shared(const void* tag, size_t bytes, const char* name) {
    for (const StaticRegion& r : statics_)
      if (r.tag == tag) {
        if (r.bytes != bytes) fault(cat("static shared '", name, "' declared with ", bytes, " bytes, before with ", r.bytes));
        return r.data.get();
      }
    size_t total = 0;
    for (const StaticRegion& r : statics_) total += r.bytes;
    if (total + bytes > kMaxStaticSharedBytes)
      fault(cat("static shared '", name, "' of ", bytes, " bytes: the block would use ", total + bytes,
                " bytes of static shared memory (at most ", kMaxStaticSharedBytes, ")"));
    StaticRegion r{tag, std::make_unique<Chunk[]>((bytes + 15) / 16), bytes};
    std::fill_n(reinterpret_cast<unsigned char*>(r.data.get()), bytes, kPoisonByte);
    statics_.push_back(std::move(r));
    return statics_.back().data.get();
  }

  // cp.async: in forward order the copy lands at issue, in reverse order when its group
  // completes (the two extremes a GPU allows; see ptx_emu.h).
  void async_copy(const AsyncCopy& c) {
    check_unread(c.dst, c.bytes, "cp.async");
    if (stream_.order == Order::forward) c.run();
    else fibers_[current_].open_group.push_back(c);
  }
  void async_commit() {
    Fiber& f = fibers_[current_];
    f.groups.push_back(std::move(f.open_group));
    f.open_group.clear();
  }
  void async_wait(int pending) {
    Fiber& f = fibers_[current_];
    if (pending < 0) fault(cat("cp.async.wait_group ", pending));
    while (f.groups.size() > size_t(pending)) {
      for (const AsyncCopy& c : f.groups.front()) c.run();
      f.groups.erase(f.groups.begin());
    }
  }

  [[noreturn]] void fault(const std::string& what) {
    const Fiber& f = fibers_[current_];
    throw KernelFault(cat("kernel ", name_, " block ", block_string(block_index_), " thread ",
                          block_string(f.index), ": ", what));
  }

  bool in_fiber() const { return current_ >= 0; }
  size_t dynamic_bytes() const { return dynamic_bytes_; }

 private:
  void run_block() {
    blockIdx = block_index_;
    // Shared memory holds garbage on a GPU: poison it so a read before a write shows.
    std::fill(reinterpret_cast<unsigned char*>(dynamic_.data()),
              reinterpret_cast<unsigned char*>(dynamic_.data()) + dynamic_bytes_, kPoisonByte);
    for (StaticRegion& r : statics_)
      std::fill_n(reinterpret_cast<unsigned char*>(r.data.get()), r.bytes, kPoisonByte);
    int n = int(fibers_.size());
    for (int k = 0; k < n; ++k) prepare_fiber(fibers_[k], g_stack_pool[k], k);
    for (Warp& w : warps_) w.pending.clear();
    for (WarpgroupState& g : warpgroups_) g.arrived = 0, g.last.reset();
    mbarriers_.clear();
    bulk_.clear();
    in_flight_.clear();
    bool reverse = stream_.order == Order::reverse;
    int warps = int(warps_.size());
    for (;;) {
      // Each warp in turn runs as far as it can (until all its threads wait at __syncthreads
      // or exited): the maximal skew between warps, so a missing barrier between one
      // warp's writes and another's reads shows in one of the two orders.
      bool ran = false;
      for (int wi = 0; wi < warps; ++wi) {
        int w = reverse ? warps - 1 - wi : wi;
        int first = w * 32, last = std::min(n, first + 32) - 1;
        for (bool progress = true; progress;) {
          progress = false;
          for (int k = reverse ? last : first; reverse ? k >= first : k <= last; k += reverse ? -1 : 1) {
            if (fibers_[k].wait != Wait::runnable) continue;
            resume(k);
            progress = ran = true;
            if (fault_) std::rethrow_exception(std::exchange(fault_, nullptr));
          }
        }
      }
      if (ran) continue;
      if (complete_bulk_copies()) continue;  // held-back copies land when nothing else can run
      if (wake_wgmma_waits()) continue;      // then the products waited for complete
      int exited = 0, at_barrier = 0;
      for (const Fiber& f : fibers_) {
        exited += f.wait == Wait::exited;
        at_barrier += f.wait == Wait::block_barrier;
      }
      if (exited == n) return;
      if (at_barrier == n) {
        for (Fiber& f : fibers_) f.wait = Wait::runnable;
        continue;
      }
      throw KernelFault(cat("kernel ", name_, " block ", block_string(block_index_),
                            ": deadlock: ", describe_waits()));
    }
  }

  // The stacks are page-aligned and equally long, so their tops, where the fibers' frames
  // live, would all fall into the same cache sets and evict one another at every switch;
  // starting fiber k's stack k cache lines lower (modulo a page) spreads them over the sets.
  static void prepare_fiber(Fiber& f, const FiberStack& stack, int k) {
    f.wait = Wait::runnable;
    f.open_group.clear();  // copies a previous block never waited for are dropped
    f.groups.clear();
    f.open_wgmma.clear();
    f.wgmma_groups.clear();
    size_t stagger = size_t(k) * 64 % 4096;
    prepare_context(f.context, stack.usable(), stack.usable_bytes() - stagger,
                    &BlockRunner::fiber_main);
  }

  // Computes every lane's result of a completed collective and wakes the lanes.
  void complete(Warp& w, const WarpGroup& g, int warp_base) {
    if (g.op == WarpOp::matrix) {
      void* lanes[32];
      for (int l = 0; l < 32; ++l) lanes[l] = reinterpret_cast<void*>(w.value[l]);
      g.run(lanes);  // runs on the last lane's fiber; the others' operands are on their stacks
      for (int l = 0; l < 32; ++l) fibers_[warp_base + l].wait = Wait::runnable;
      return;
    }
    unsigned ballot = 0;
    for (int l = 0; l < 32; ++l)
      if ((g.mask >> l & 1u) && w.value[l]) ballot |= 1u << l;
    int first = __builtin_ctz(g.mask);
    for (int l = 0; l < 32; ++l) {
      if (!(g.mask >> l & 1u)) continue;
      if (w.width[l] != w.width[first])
        fault(cat(g.name, ": lanes ", first, " and ", l, " pass different widths"));
      int width = w.width[l], segment = l & ~(width - 1), src = l;
      switch (g.op) {
        case WarpOp::shfl: src = segment + (w.arg[l] & (width - 1)); break;
        case WarpOp::shfl_up: src = l - w.arg[l] >= segment ? l - w.arg[l] : l; break;
        case WarpOp::shfl_down: src = l + w.arg[l] < segment + width ? l + w.arg[l] : l; break;
        case WarpOp::shfl_xor: src = (l ^ w.arg[l]) < segment + width ? l ^ w.arg[l] : l; break;
        case WarpOp::ballot: case WarpOp::sync: case WarpOp::matrix: break;
      }
      if (!(g.mask >> src & 1u))
        fault(cat(g.name, ": lane ", l, " reads lane ", src, " outside mask ", hex(g.mask)));
      w.result[l] = g.op == WarpOp::ballot ? ballot : g.op == WarpOp::sync ? 0 : w.value[src];
      fibers_[warp_base + l].wait = Wait::runnable;
    }
  }

  // "threads 0-31 at __syncthreads; threads 32-40 exited" (threads as linear indices).
  std::string describe_waits() const {
    auto state = [](const Fiber& f) -> std::string {
      switch (f.wait) {
        case Wait::exited: return "exited";
        case Wait::block_barrier: return "at __syncthreads";
        case Wait::warp: return cat("at ", f.waiting_at, " (mask ", hex(f.waiting_mask), ")");
        case Wait::warpgroup: return cat("at ", f.waiting_at, " (warpgroup)");
        case Wait::mbarrier: return cat("at mbarrier.try_wait (parity ", f.waiting_parity, ")");
        case Wait::wgmma_wait: return std::string("at wgmma.wait_group");
        case Wait::runnable: return "runnable";
      }
      return "";
    };
    std::string out;
    size_t n = fibers_.size();
    for (size_t k = 0; k < n;) {
      size_t end = k;
      while (end + 1 < n && state(fibers_[end + 1]) == state(fibers_[k])) ++end;
      out += cat(out.empty() ? "" : "; ", k == end ? cat("thread ", k) : cat("threads ", k, "-", end),
                 " ", state(fibers_[k]));
      k = end + 1;
    }
    return out;
  }

  void resume(int k) {
    current_ = k;
    threadIdx = fibers_[k].index;
    stream_.switches += 2;
    switch_context(scheduler_, fibers_[k].context);
    current_ = -1;
  }

  void yield() {
    int k = current_;
    switch_context(fibers_[k].context, scheduler_);
  }

  // Every fiber's entry function. It has no caller to return to: when the kernel body returns
  // or throws it switches to the scheduler for the last time (the scheduler rethrows what it
  // threw), and the next block prepares the stack afresh.
  [[noreturn]] static void fiber_main() {
    BlockRunner* r = g_active;
    int k = r->current_;
    try {
      r->body_.call(r->body_.closure);
    } catch (...) {
      r->fault_ = std::current_exception();
    }
    r->fibers_[k].wait = Wait::exited;
    switch_context(r->fibers_[k].context, r->scheduler_);
    __builtin_unreachable();
  }

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

void check_config(const char* name, dim3 grid, dim3 block, size_t dynamic_bytes) {
  auto bad = [&](const std::string& what) {
    std::ostringstream s;
    s << "launch of kernel " << name << ": invalid configuration: " << what << " (grid "
      << grid.x << "," << grid.y << "," << grid.z << ", block " << block.x << "," << block.y
      << "," << block.z << ", dynamic shared " << dynamic_bytes << " bytes)";
    throw KernelFault(s.str());
  };
  size_t threads = size_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock) bad("threads per block must be 1-1024");
  if (block.z > 64) bad("block.z must be <= 64");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) bad("empty grid");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) bad("grid too large");
  if (dynamic_bytes > kMaxDynamicSharedBytes) bad("more than 227 KiB of dynamic shared memory");
}

}  // namespace

void launch(Stream* stream, const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
            KernelBody body) {
  if (g_active) throw KernelFault(std::string("kernel ") + name + " launched from device code");
  check_config(name, grid, block, dynamic_shared_bytes);
  require_no_shadow_stack();
  Stream default_stream;
  Stream& s = stream ? *stream : default_stream;
  ++s.launches;
  BlockRunner runner(s, name, grid, block, dynamic_shared_bytes, body);
  g_active = &runner;
  try {
    runner.run_grid();
  } catch (...) {
    g_active = nullptr;
    throw;
  }
  g_active = nullptr;
}

namespace {
StreamQueue g_stream_queue = nullptr;
}  // namespace

void set_stream_queue(StreamQueue queue) { g_stream_queue = queue; }

void launch_on_stream(Stream* stream, const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                      std::function<void()> thread_body) {
  auto run = [stream, name, grid, block, dynamic_shared_bytes, body = std::move(thread_body)] {
    launch(stream, name, grid, block, dynamic_shared_bytes,
           {[](const void* c) { (*static_cast<const std::function<void()>*>(c))(); }, &body});
  };
  if (g_stream_queue) g_stream_queue(stream, name, std::move(run));
  else run();
}

namespace detail {

uint64_t warp_collective(WarpOp op, const char* name, unsigned mask, uint64_t value, int arg,
                         int width) {
  if (!g_active || !g_active->in_fiber()) fault(std::string(name) + " called outside a kernel");
  return g_active->warp_collective(op, name, mask, value, arg, width);
}

void warp_matrix_collective(const char* name, void* operands, MatrixRun run) {
  if (!g_active || !g_active->in_fiber()) fault(std::string(name) + " called outside a kernel");
  g_active->warp_collective(WarpOp::matrix, name, 0xffffffffu, reinterpret_cast<uintptr_t>(operands), 0,
                            32, run);
}

void warpgroup_collective(const char* name, const void* operands, size_t bytes, MatrixRun run, bool async,
                          MatrixReads reads) {
  if (!g_active || !g_active->in_fiber()) fault(std::string(name) + " called outside a kernel");
  g_active->warpgroup_collective(name, operands, bytes, run, async, reads);
}

void async_matrix_commit() {
  if (!g_active || !g_active->in_fiber()) fault("wgmma.commit_group called outside a kernel");
  g_active->async_matrix_commit();
}

void async_matrix_wait(int pending) {
  if (!g_active || !g_active->in_fiber()) fault("wgmma.wait_group called outside a kernel");
  g_active->async_matrix_wait(pending);
}

void* shared_base(uint32_t& window_start, size_t& bytes) {
  if (!g_active || !g_active->in_fiber()) fault("shared memory address taken outside a kernel");
  window_start = kDynamicWindowStart;
  bytes = g_active->dynamic_bytes();
  return g_active->dynamic_shared();
}

void mbarrier_init(void* bar, int count) {
  if (!g_active || !g_active->in_fiber()) fault("mbarrier.init outside a kernel");
  g_active->mbarrier_init(bar, count);
}

void mbarrier_arrive(void* bar, long long expect_tx) {
  if (!g_active || !g_active->in_fiber()) fault("mbarrier.arrive outside a kernel");
  g_active->mbarrier_arrive(bar, expect_tx);
}

void mbarrier_wait(void* bar, int parity) {
  if (!g_active || !g_active->in_fiber()) fault("mbarrier.try_wait outside a kernel");
  g_active->mbarrier_wait(bar, parity);
}

void bulk_copy(void* bar, void* dst, long long bytes, std::function<void()> copy) {
  if (!g_active || !g_active->in_fiber()) fault("cp.async.bulk outside a kernel");
  g_active->bulk_copy(bar, dst, bytes, std::move(copy));
}

void sync_block() {
  if (!g_active || !g_active->in_fiber()) fault("__syncthreads called outside a kernel");
  g_active->sync_block();
}

bool in_shared(const void* p, size_t bytes) {
  if (!g_active || !g_active->in_fiber()) fault("shared memory checked outside a kernel");
  return g_active->in_shared(p, bytes);
}

void async_copy(void* dst, const void* src, size_t bytes, size_t src_bytes) {
  if (!g_active || !g_active->in_fiber()) fault("cp.async outside a kernel");
  g_active->async_copy({dst, src, bytes, src_bytes});
}

void async_commit() {
  if (!g_active || !g_active->in_fiber()) fault("cp.async.commit_group outside a kernel");
  g_active->async_commit();
}

void async_wait(int pending) {
  if (!g_active || !g_active->in_fiber()) fault("cp.async.wait_group outside a kernel");
  g_active->async_wait(pending);
}

void* static_shared(const void* tag, size_t bytes, const char* name) {
  if (!g_active || !g_active->in_fiber()) fault("static shared memory used outside a kernel");
  return g_active->static_shared(tag, bytes, name);
}

void* dynamic_shared_memory() {
  if (!g_active || !g_active->in_fiber()) fault("dynamic shared memory used outside a kernel");
  return g_active->dynamic_shared();
}

void fault(const std::string& what) {
  if (g_active && g_active->in_fiber()) g_active->fault(what);
  throw KernelFault(what);
}

void check_aligned(const void* p, size_t alignment, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    std::ostringstream s;
    s << "misaligned address " << p << " for a " << alignment << "-byte " << what;
    fault(s.str());
  }
}

}  // namespace detail
}  // namespace pptrain::emu
