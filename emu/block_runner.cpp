// The SIMT emulator's scheduler: a block's threads as fibers, run warp by warp until each
// waits or exits; warp collectives; shared memory. See block_runner.h.
#include "emu/block_runner.h"

#include <algorithm>
#include <utility>

namespace pptrain::emu::runner {

using detail::WarpOp;

thread_local BlockRunner* g_active = nullptr;

namespace {
thread_local std::vector<FiberStack> g_stack_pool;  // reused across launches
}  // namespace

BlockRunner::BlockRunner(Stream& stream, const char* name, dim3 grid, dim3 block, size_t dynamic_bytes,
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

void BlockRunner::run_grid() {
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
void BlockRunner::sync_block() {
  Fiber& f = fibers_[current_];
  f.wait = Wait::block_barrier;
  f.waiting_at = "__syncthreads";
  yield();
}

uint64_t BlockRunner::warp_collective(WarpOp op, const char* name, unsigned mask, uint64_t value, int arg,
                                      int width, detail::MatrixRun run) {
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

// "dynamic shared byte 4096" (offset from the start of dynamic shared memory) or a pointer.
std::string BlockRunner::shared_string(const void* p) const {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(dynamic_.data());
  if (a >= b && a < b + dynamic_bytes_) return cat("dynamic shared byte ", a - b);
  return cat("address ", p);
}

bool BlockRunner::in_shared(const void* p, size_t bytes) const {
  auto in = [&](const void* lo, size_t n) {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(lo);
    return a >= b && a + bytes <= b + n;
  };
  if (in(dynamic_.data(), dynamic_bytes_)) return true;
  for (const StaticRegion& r : statics_)
    if (in(r.data.get(), r.bytes)) return true;
  return false;
}

void* BlockRunner::static_shared(const void* tag, size_t bytes, const char* name) {
  for (const StaticRegion& r : statics_)
    if (r.tag == tag) {
      if (r.bytes != bytes)
        fault(cat("static shared '", name, "' declared with ", bytes, " bytes, before with ", r.bytes));
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

void BlockRunner::fault(const std::string& what) {
  const Fiber& f = fibers_[current_];
  throw KernelFault(cat("kernel ", name_, " block ", block_string(block_index_), " thread ",
                        block_string(f.index), ": ", what));
}

void BlockRunner::run_block() {
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
void BlockRunner::prepare_fiber(Fiber& f, const FiberStack& stack, int k) {
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
void BlockRunner::complete(Warp& w, const WarpGroup& g, int warp_base) {
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
std::string BlockRunner::describe_waits() const {
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

void BlockRunner::resume(int k) {
  current_ = k;
  threadIdx = fibers_[k].index;
  stream_.switches += 2;
  switch_context(scheduler_, fibers_[k].context);
  current_ = -1;
}

void BlockRunner::yield() {
  int k = current_;
  switch_context(fibers_[k].context, scheduler_);
}

// Every fiber's entry function. It has no caller to return to: when the kernel body returns
// or throws it switches to the scheduler for the last time (the scheduler rethrows what it
// threw), and the next block prepares the stack afresh.
void BlockRunner::fiber_main() {
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

}  // namespace pptrain::emu::runner
