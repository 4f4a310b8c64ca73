// The SIMT emulator's asynchronous operations: warpgroup products (wgmma) and their
// commit/wait groups, mbarriers, bulk tensor copies (TMA) and cp.async, each completing at
// issue in forward order and as late as its wait allows in reverse order, and the checks that
// report a write racing a product still in flight. See block_runner.h and ptx_emu.h.
#include "emu/block_runner.h"

#include <cstdint>
#include <utility>

namespace pptrain::emu::runner {

// A warpgroup-wide operation: all 128 threads of the calling thread's warpgroup arrive
// (the block's threads must be a multiple of 128), then `run` runs once with every lane's
// operands, on the last arriving thread. With `async`, run is wrapped in an operation that
// completes at the thread's wgmma.wait_group (see async_matrix_wait) or, in forward order,
// at once: the two extremes a GPU allows.
void BlockRunner::warpgroup_collective(const char* name, const void* operands, size_t bytes, detail::MatrixRun run,
                                       bool async, detail::MatrixReads reads) {
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

BlockRunner::Mbarrier& BlockRunner::mbarrier_at(const void* bar, const char* what) {
  auto it = mbarriers_.find(bar);
  if (it == mbarriers_.end()) fault(cat(what, " on an mbarrier that was not initialised in this block"));
  return it->second;
}

void BlockRunner::mbarrier_init(void* bar, int count) {
  if (!in_shared(bar, 8) || reinterpret_cast<uintptr_t>(bar) % 8)
    fault("mbarrier.init: not 8-byte aligned shared memory");
  if (count < 1 || count > (1 << 20) - 1) fault(cat("mbarrier.init with count ", count));
  Mbarrier m;
  m.count = m.pending = count;
  mbarriers_[bar] = m;
}

void BlockRunner::mbarrier_update(const void* bar, Mbarrier& m, int arrivals, long long tx) {
  m.tx += tx;
  m.pending -= arrivals;
  if (m.pending < 0) fault(cat("mbarrier: ", m.count - m.pending, " arrivals in a phase of ", m.count));
  if (m.pending > 0 || m.tx != 0) return;
  m.phase ^= 1;
  m.pending = m.count;
  for (Fiber& f : fibers_)
    if (f.wait == Wait::mbarrier && f.waiting_bar == bar && f.waiting_parity != m.phase) f.wait = Wait::runnable;
}

void BlockRunner::mbarrier_arrive(void* bar, long long expect_tx) {
  mbarrier_update(bar, mbarrier_at(bar, "mbarrier.arrive"), 1, expect_tx);
}

// "The phase of parity p has completed": the current phase's parity is no longer p.
void BlockRunner::mbarrier_wait(void* bar, int parity) {
  Fiber& f = fibers_[current_];
  while (mbarrier_at(bar, "mbarrier.try_wait").phase == parity) {
    f.wait = Wait::mbarrier;
    f.waiting_bar = bar;
    f.waiting_parity = parity;
    f.waiting_at = "mbarrier.try_wait";
    yield();
  }
}

void BlockRunner::bulk_copy(void* bar, void* dst, long long bytes, std::function<void()> copy) {
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
bool BlockRunner::wake_wgmma_waits() {
  bool any = false;
  for (Fiber& f : fibers_)
    if (f.wait == Wait::wgmma_wait) f.wait = Wait::runnable, any = true;
  return any;
}

// Completes held-back bulk copies (reverse order) when no thread can run: only those on
// barriers a thread is waiting for (a copy another barrier covers stays in flight, so a
// read that forgot its own barrier sees the poison), else all of them. False if none.
bool BlockRunner::complete_bulk_copies() {
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

void BlockRunner::async_matrix_commit() {
  Fiber& f = fibers_[current_];
  f.wgmma_groups.push_back(std::move(f.open_wgmma));
  f.open_wgmma.clear();
}

// In reverse order a wait that has to complete a product first lets every other thread run
// (Wait::wgmma_wait is woken only when nothing else can run), so that what they do while
// the product is in flight -- a stage released too early and refilled, a plain store into
// an operand -- happens before it reads its operands, and is caught (check_unread, complete).
void BlockRunner::async_matrix_wait(int pending) {
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
void BlockRunner::complete(detail::AsyncMatrixOp& op) {
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
void BlockRunner::check_unread(const void* dst, size_t bytes, const char* what) {
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

// cp.async: in forward order the copy lands at issue, in reverse order when its group
// completes (the two extremes a GPU allows; see ptx_emu.h).
void BlockRunner::async_copy(const AsyncCopy& c) {
  check_unread(c.dst, c.bytes, "cp.async");
  if (stream_.order == Order::forward) c.run();
  else fibers_[current_].open_group.push_back(c);
}

void BlockRunner::async_commit() {
  Fiber& f = fibers_[current_];
  f.groups.push_back(std::move(f.open_group));
  f.open_group.clear();
}

void BlockRunner::async_wait(int pending) {
  Fiber& f = fibers_[current_];
  if (pending < 0) fault(cat("cp.async.wait_group ", pending));
  while (f.groups.size() > size_t(pending)) {
    for (const AsyncCopy& c : f.groups.front()) c.run();
    f.groups.erase(f.groups.begin());
  }
}

}  // namespace pptrain::emu::runner
