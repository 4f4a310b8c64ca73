// SIMT emulator: a kernel launch (checked, then run by a runner::BlockRunner, see
// block_runner.h) and the device-side entry points of emu.h's detail namespace, which reach
// the launch running on this OS thread.
#include "emu/emu.h"

#include <sstream>
#include <string>
#include <utility>

#include "emu/block_runner.h"
#include "emu/fiber.h"

namespace pptrain::emu {
namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;

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
  if (runner::g_active) throw KernelFault(std::string("kernel ") + name + " launched from device code");
  check_config(name, grid, block, dynamic_shared_bytes);
  require_no_shadow_stack();
  Stream default_stream;
  Stream& s = stream ? *stream : default_stream;
  ++s.launches;
  runner::BlockRunner block_runner(s, name, grid, block, dynamic_shared_bytes, body);
  runner::g_active = &block_runner;
  try {
    block_runner.run_grid();
  } catch (...) {
    runner::g_active = nullptr;
    throw;
  }
  runner::g_active = nullptr;
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
namespace {

// The launch whose thread is calling; outside a kernel's thread, a fault saying so
// ("<name><outside>"). On every device-side call: builds no string unless it fails.
runner::BlockRunner& in_kernel(const char* outside, const char* name = "") {
  if (!runner::g_active || !runner::g_active->in_fiber()) fault(std::string(name) + outside);
  return *runner::g_active;
}

}  // namespace

uint64_t warp_collective(WarpOp op, const char* name, unsigned mask, uint64_t value, int arg,
                         int width) {
  return in_kernel(" called outside a kernel", name).warp_collective(op, name, mask, value, arg, width);
}

void warp_matrix_collective(const char* name, void* operands, MatrixRun run) {
  in_kernel(" called outside a kernel", name)
      .warp_collective(WarpOp::matrix, name, 0xffffffffu, reinterpret_cast<uintptr_t>(operands), 0, 32, run);
}

void warpgroup_collective(const char* name, const void* operands, size_t bytes, MatrixRun run, bool async,
                          MatrixReads reads) {
  in_kernel(" called outside a kernel", name).warpgroup_collective(name, operands, bytes, run, async, reads);
}

void async_matrix_commit() {
  in_kernel("wgmma.commit_group called outside a kernel").async_matrix_commit();
}

void async_matrix_wait(int pending) {
  in_kernel("wgmma.wait_group called outside a kernel").async_matrix_wait(pending);
}

void* shared_base(uint32_t& window_start, size_t& bytes) {
  runner::BlockRunner& launch = in_kernel("shared memory address taken outside a kernel");
  window_start = kDynamicWindowStart;
  bytes = launch.dynamic_bytes();
  return launch.dynamic_shared();
}

void mbarrier_init(void* bar, int count) {
  in_kernel("mbarrier.init outside a kernel").mbarrier_init(bar, count);
}

void mbarrier_arrive(void* bar, long long expect_tx) {
  in_kernel("mbarrier.arrive outside a kernel").mbarrier_arrive(bar, expect_tx);
}

void mbarrier_wait(void* bar, int parity) {
  in_kernel("mbarrier.try_wait outside a kernel").mbarrier_wait(bar, parity);
}

void bulk_copy(void* bar, void* dst, long long bytes, std::function<void()> copy) {
  in_kernel("cp.async.bulk outside a kernel").bulk_copy(bar, dst, bytes, std::move(copy));
}

void sync_block() {
  in_kernel("__syncthreads called outside a kernel").sync_block();
}

bool in_shared(const void* p, size_t bytes) {
  return in_kernel("shared memory checked outside a kernel").in_shared(p, bytes);
}

void async_copy(void* dst, const void* src, size_t bytes, size_t src_bytes) {
  in_kernel("cp.async outside a kernel").async_copy({dst, src, bytes, src_bytes});
}

void async_commit() {
  in_kernel("cp.async.commit_group outside a kernel").async_commit();
}

void async_wait(int pending) {
  in_kernel("cp.async.wait_group outside a kernel").async_wait(pending);
}

void* static_shared(const void* tag, size_t bytes, const char* name) {
  return in_kernel("static shared memory used outside a kernel").static_shared(tag, bytes, name);
}

void* dynamic_shared_memory() {
  return in_kernel("dynamic shared memory used outside a kernel").dynamic_shared();
}

void fault(const std::string& what) {
  if (runner::g_active && runner::g_active->in_fiber()) runner::g_active->fault(what);
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
