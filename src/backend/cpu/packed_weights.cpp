// oneDNN's matmul on weights packed once a window (packed_weights.h).
#include "backend/cpu/packed_weights.h"

#include <dlfcn.h>  // dlsym

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/gemm_library.h"
#include "backend/cpu/vector_math.h"
#include "core/error.h"
// simd.h's register transposes, in the baseline ISA this file is compiled for (isa.h).
#include "backend/cpu/simd.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
#if DNNL_VERSION_MAJOR == 2
#define PPTRAIN_PACKED_WEIGHTS 1
#endif
#endif

namespace pptrain::cpu {

#ifdef PPTRAIN_PACKED_WEIGHTS

namespace {

// The entry points used, typed by the header's own declarations and found with dlsym.
#define PPTRAIN_DNNL_ENTRIES(X)                                                                                   \
  X(dnnl_version) X(dnnl_engine_create) X(dnnl_engine_destroy) X(dnnl_stream_create) X(dnnl_stream_destroy)     \
  X(dnnl_stream_wait) X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_init_by_strides)                       \
  X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size) X(dnnl_matmul_desc_init) X(dnnl_primitive_desc_create) \
  X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) X(dnnl_primitive_desc_query_md)                   \
  X(dnnl_primitive_create) X(dnnl_primitive_destroy) X(dnnl_primitive_execute) X(dnnl_memory_create)            \
  X(dnnl_memory_destroy) X(dnnl_memory_set_data_handle) X(dnnl_reorder_primitive_desc_create)                   \
  X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_post_ops)             \
  X(dnnl_post_ops_create) X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_sum)

struct Api {
#define PPTRAIN_DNNL_MEMBER(name) decltype(&::name) name = nullptr;
  PPTRAIN_DNNL_ENTRIES(PPTRAIN_DNNL_MEMBER)
#undef PPTRAIN_DNNL_MEMBER
};

// What this process can run, decided once: the entry points, or why not.
struct Availability {
  Api api;
  std::string why_not, description;
};

const Api& api();

void check(dnnl_status_t status, const char* what, int n, int k, int cols) {
  if (status != dnnl_success)
    fail("oneDNN's ", what, " returned status ", int(status), " for the linear layer's product n=", n, " k=", k,
         " cols=", cols, " (PPTRAIN_CPU_GEMM=openblas runs the linear layers on OpenBLAS alone)");
}

// A oneDNN handle and the function that destroys it.
template <typename T>
class Handle {
 public:
  using Destroy = dnnl_status_t (*)(T);
  Handle() = default;
  Handle(T handle, Destroy destroy) : handle_(handle), destroy_(destroy) {}
  Handle(Handle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), destroy_(other.destroy_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      destroy_ = other.destroy_;
    }
    return *this;
  }
  ~Handle() { reset(); }
  T get() const { return handle_; }

 private:
  void reset() {
    if (handle_) destroy_(handle_);
    handle_ = nullptr;
  }
  T handle_ = nullptr;
  Destroy destroy_ = nullptr;
};

using PrimitiveDesc = Handle<dnnl_primitive_desc_t>;
using Primitive = Handle<dnnl_primitive_t>;
using Memory = Handle<dnnl_memory_t>;

dnnl_memory_desc_t matrix(int rows, int cols, int64_t row_stride, int64_t col_stride) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols}, strides = {row_stride, col_stride};
  check(api().dnnl_memory_desc_init_by_strides(&md, 2, dims, dnnl_f32, strides), "memory_desc_init", rows, cols, 0);
  return md;
}

// A weight's plain layout, read as the matmul's [k, cols] operand.
dnnl_memory_desc_t plain_weights(PackedWeights::Use use, int k, int cols) {
  return use == PackedWeights::Use::forward ? matrix(k, cols, 1, k) : matrix(k, cols, cols, 1);
}

// The blocked layouts oneDNN's brgemm matmul takes its weights in, [k, cols] cut into
// (bk × bn) blocks, each block dense with k outer (e.g. "BA16a64b"): the block (kb, nb) at
// kb·strides[0] + nb·strides[1]. Where the layout is one of these without padding, a weight is
// copied into it here, one block at a time: oneDNN's own reorder ran at ~3 GB/s on these
// (measured on a Zen 4 core: 0.33 ms a 1 MiB weight, half of what packing saved in a step).
struct Blocks {
  int64_t bk, bn, stride_k, stride_n;
};
std::optional<Blocks> simple_blocks(const dnnl_memory_desc_t& md) {
  if (md.format_kind != dnnl_blocked || md.ndims != 2 || md.offset0 != 0 || md.extra.flags != 0) return std::nullopt;
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  if (b.inner_nblks != 2 || b.inner_idxs[0] != 0 || b.inner_idxs[1] != 1) return std::nullopt;
  for (int d = 0; d < 2; ++d)
    if (md.padded_dims[d] != md.dims[d] || md.dims[d] % b.inner_blks[d] != 0) return std::nullopt;
  return Blocks{b.inner_blks[0], b.inner_blks[1], b.strides[0], b.strides[1]};
}

// packed <- w in `blocks`: the element (k, n) of the matmul's [k, cols] operand is w[n·k_total
// + k] (forward: wᵀ) or w[k·cols + n] (dgrad). Blocks are spread over the threads.
void copy_into_blocks(float* packed, const float* w, PackedWeights::Use use, int k, int cols, const Blocks& b) {
  namespace simd = PPTRAIN_CPU_ISA::simd;
  const bool transposed = use == PackedWeights::Use::forward;
  // The forward's blocks are wᵀ's: in squares of a vector's width, transposed in registers,
  // each store fills a whole vector of the block. One float at a time, every store of a
  // block's column went to a line of its own (measured on a Zen 4 core, the pp 2 model's 16
  // forward layouts, 12.6 MB of weights, cold: 2.6-2.9 ms so, 1.9-2.2 in squares; the
  // dgrad's row copies 1.3-1.6), and the first stage's first forward of a step waits for them.
  const int64_t kblocks = k / b.bk, nblocks = cols / b.bn;
  const bool parallel = int64_t(k) * cols >= (int64_t(1) << 16);
  if (transposed && b.bk % simd::kWidth == 0 && b.bn % simd::kWidth == 0) {
    // A vector's width of w's rows at a time, along the whole of k: that many read streams
    // (a block's bn rows at once were bn streams of one line each per block).
    const int64_t strips = b.bn / simd::kWidth;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t nb = 0; nb < nblocks; ++nb)
      for (int64_t strip = 0; strip < strips; ++strip) {
        const int64_t nn = strip * simd::kWidth;
        const float* rows = w + (nb * b.bn + nn) * k;  // [kWidth, k], row stride k
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          float* block = packed + kb * b.stride_k + nb * b.stride_n;  // [bk, bn]
          for (int64_t kk = 0; kk < b.bk; kk += simd::kWidth)
            simd::transpose_block(block + kk * b.bn + nn, b.bn, rows + kb * b.bk + kk, k);
        }
      }
    return;
  }
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t nb = 0; nb < nblocks; ++nb)
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      float* block = packed + kb * b.stride_k + nb * b.stride_n;  // [bk, bn]
      const float* rows = w + nb * b.bn * k + kb * b.bk;           // w's [bn, bk] under it, row stride k
      if (transposed) {
        // Along a row of w (contiguous k), down a column of the block.
        for (int64_t nn = 0; nn < b.bn; ++nn)
          for (int64_t kk = 0; kk < b.bk; ++kk) block[kk * b.bn + nn] = rows[nn * k + kk];
      } else {
        for (int64_t kk = 0; kk < b.bk; ++kk) {
          const float* row = w + (kb * b.bk + kk) * cols + nb * b.bn;
          std::copy(row, row + b.bn, block + kk * b.bn);
        }
      }
    }
}

}  // namespace

struct PackedWeights::State {
  // One shape's matmul: its primitive, the packed weight layout it reads, and memory objects
  // whose data pointers are set per call.
  struct Matmul {
    Primitive primitive;
    dnnl_memory_desc_t packed;
    Memory src, weights, bias, dst;
    std::string impl;
  };

  // A weight's packed copy: the layout, the bytes, the window it was packed in, and the
  // reorder from the plain layout.
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  using Storage = std::unique_ptr<void, Free>;
  struct Packed {
    dnnl_memory_desc_t layout;
    Storage data;
    size_t bytes = 0;
    uint64_t window = 0;
    Primitive reorder;
  };

  Handle<dnnl_engine_t> engine;
  Handle<dnnl_stream_t> stream;
  // (use, n, k, cols, bias, accumulate)
  std::map<std::tuple<int, int, int, int, bool, bool>, Matmul> matmuls;
  // (weight, use). A copy stays while a window or the one before it used it: an evaluation
  // between two steps uses no dgrad layouts, and the step after it repacks them in place
  // instead of allocating again (and paying the page faults of fresh memory).
  std::map<std::pair<const float*, int>, Packed> packed;
  uint64_t window = 0;
  uint64_t packings = 0;  // copies made (PackedWeights::packings)

  // Storage of `bytes` for a copy packed in this window (`for_copy`'s): that of a copy of
  // another weight not yet used in this window, else fresh. Taking an unused copy keeps the
  // bytes held at the weights' two layouts when the weights move: under
  // training.post_validation the masters alternate between two arenas every step
  // (train/update_backup.h), and each window would otherwise pack into new storage while
  // the other arena's copies waited to be freed, twice the bytes for good. A copy taken from
  // a weight that is still to be used in this window is only packed again then.
  Storage storage(size_t bytes, int k, int cols, const Packed* for_copy) {
    for (auto it = packed.begin(); it != packed.end(); ++it) {
      Packed& other = it->second;
      if (&other == for_copy || other.window == window || other.bytes != bytes || !other.data) continue;
      Storage taken = std::move(other.data);
      packed.erase(it);
      return taken;
    }
    Storage fresh{std::aligned_alloc(64, (bytes + 63) / 64 * 64)};
    if (!fresh) fail("out of memory packing a ", k, " x ", cols, " weight (", bytes, " bytes)");
    return fresh;
  }

  State() {
    const Api& a = api();
    dnnl_engine_t e = nullptr;
    check(a.dnnl_engine_create(&e, dnnl_cpu, 0), "engine_create", 0, 0, 0);
    engine = {e, a.dnnl_engine_destroy};
    dnnl_stream_t s = nullptr;
    check(a.dnnl_stream_create(&s, e, dnnl_stream_default_flags), "stream_create", 0, 0, 0);
    stream = {s, a.dnnl_stream_destroy};
  }

  Memory memory(const dnnl_memory_desc_t& md, int n, int k, int cols) {
    dnnl_memory_t m = nullptr;
    check(api().dnnl_memory_create(&m, &md, engine.get(), DNNL_MEMORY_NONE), "memory_create", n, k, cols);
    return {m, api().dnnl_memory_destroy};
  }

  Matmul& matmul(Use use, int n, int k, int cols, bool bias, bool accumulate) {
    const auto key = std::make_tuple(int(use), n, k, cols, bias, accumulate);
    if (auto it = matmuls.find(key); it != matmuls.end()) return it->second;
    const Api& a = api();
    const dnnl_memory_desc_t src = matrix(n, k, k, 1), dst = matrix(n, cols, cols, 1), bias_md = matrix(1, cols, cols, 1);
    dnnl_memory_desc_t any;
    const dnnl_dims_t wdims = {k, cols};
    check(a.dnnl_memory_desc_init_by_tag(&any, 2, wdims, dnnl_f32, dnnl_format_tag_any), "memory_desc_init", n, k,
          cols);
    dnnl_matmul_desc_t desc;
    check(a.dnnl_matmul_desc_init(&desc, &src, &any, bias ? &bias_md : nullptr, &dst), "matmul_desc_init", n, k, cols);
    // accumulate: c += the product, oneDNN's sum post-op (c read with scale 1).
    dnnl_primitive_attr_t attr = nullptr;
    check(a.dnnl_primitive_attr_create(&attr), "primitive_attr_create", n, k, cols);
    Handle<dnnl_primitive_attr_t> attr_handle{attr, a.dnnl_primitive_attr_destroy};
    if (accumulate) {
      dnnl_post_ops_t ops = nullptr;
      check(a.dnnl_post_ops_create(&ops), "post_ops_create", n, k, cols);
      Handle<dnnl_post_ops_t> ops_handle{ops, a.dnnl_post_ops_destroy};
      check(a.dnnl_post_ops_append_sum(ops, 1.0f), "post_ops_append_sum", n, k, cols);
      check(a.dnnl_primitive_attr_set_post_ops(attr, ops), "primitive_attr_set_post_ops", n, k, cols);
    }
    dnnl_primitive_desc_t pd = nullptr;
    check(a.dnnl_primitive_desc_create(&pd, &desc, attr, engine.get(), nullptr), "matmul primitive_desc_create", n,
          k, cols);
    PrimitiveDesc pd_handle{pd, a.dnnl_primitive_desc_destroy};
    Matmul m;
    dnnl_primitive_t p = nullptr;
    check(a.dnnl_primitive_create(&p, pd), "matmul primitive_create", n, k, cols);
    m.primitive = {p, a.dnnl_primitive_destroy};
    m.packed = *a.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const char* impl = nullptr;
    if (a.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) m.impl = impl;
    m.src = memory(src, n, k, cols);
    m.weights = memory(m.packed, n, k, cols);
    if (bias) m.bias = memory(bias_md, n, k, cols);
    m.dst = memory(dst, n, k, cols);
    return matmuls.emplace(key, std::move(m)).first->second;
  }

  // The packed layout of a product's weight: that of a matmul of the same shape already made
  // (one with or without a bias, accumulating or not: brgemm's weight layout follows the
  // shape alone, which PackedWeights.PreparedCopiesServeTheProducts checks), else of a new
  // plain one.
  const dnnl_memory_desc_t& layout(Use use, int n, int k, int cols) {
    const auto it = matmuls.lower_bound(std::make_tuple(int(use), n, k, cols, false, false));
    if (it != matmuls.end() && std::get<0>(it->first) == int(use) && std::get<1>(it->first) == n &&
        std::get<2>(it->first) == k && std::get<3>(it->first) == cols)
      return it->second.packed;
    return matmul(use, n, k, cols, false, false).packed;
  }

  // w's copy in `layout`, packed in this window.
  void* packed_weights(Use use, const float* w, int k, int cols, const dnnl_memory_desc_t& layout) {
    const Api& a = api();
    Packed& p = packed[{w, int(use)}];
    const bool same_layout = p.data && a.dnnl_memory_desc_equal(&p.layout, &layout);
    if (same_layout && p.window == window) return p.data.get();
    const std::optional<Blocks> blocks = simple_blocks(layout);
    if (!same_layout) {
      p.layout = layout;
      const size_t bytes = a.dnnl_memory_desc_get_size(&layout);
      if (bytes != p.bytes || !p.data) {
        p.data.reset();
        p.data = storage(bytes, k, cols, &p);
        p.bytes = bytes;
      }
      p.reorder = {};
    }
    ++packings;
    if (blocks) {
      copy_into_blocks(static_cast<float*>(p.data.get()), w, use, k, cols, *blocks);
      p.window = window;
      return p.data.get();
    }
    const dnnl_memory_desc_t plain = plain_weights(use, k, cols);
    if (!p.reorder.get()) {
      dnnl_primitive_desc_t pd = nullptr;
      check(a.dnnl_reorder_primitive_desc_create(&pd, &plain, engine.get(), &layout, engine.get(), nullptr),
            "reorder primitive_desc_create", 0, k, cols);
      PrimitiveDesc pd_handle{pd, a.dnnl_primitive_desc_destroy};
      dnnl_primitive_t r = nullptr;
      check(a.dnnl_primitive_create(&r, pd), "reorder primitive_create", 0, k, cols);
      p.reorder = {r, a.dnnl_primitive_destroy};
    }
    Memory from = memory(plain, 0, k, cols), to = memory(layout, 0, k, cols);
    check(a.dnnl_memory_set_data_handle(from.get(), const_cast<float*>(w)), "memory_set_data_handle", 0, k, cols);
    check(a.dnnl_memory_set_data_handle(to.get(), p.data.get()), "memory_set_data_handle", 0, k, cols);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}};
    check(a.dnnl_primitive_execute(p.reorder.get(), stream.get(), 2, args), "reorder execute", 0, k, cols);
    check(a.dnnl_stream_wait(stream.get()), "stream_wait", 0, k, cols);
    p.window = window;
    return p.data.get();
  }
};

namespace {

Availability decide() {
  Availability out;
  if (const char* lib = std::getenv("PPTRAIN_CPU_GEMM"); lib && *lib) {
    out.why_not = cat("PPTRAIN_CPU_GEMM=", lib, " runs every product on that library");
    return out;
  }
  // The library PPTRAIN_CPU_GEMM=onednn would run (gemm_library.cpp opens it once).
  void* handle = gemm_library_handle(GemmLibrary::onednn);
  if (!handle) {
    out.why_not = cat("libdnnl.so.2 does not load (", gemm_library_missing_hint(GemmLibrary::onednn), ")");
    return out;
  }
#define PPTRAIN_DNNL_FIND(name)                                                              \
  out.api.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                \
  if (!out.api.name) {                                                                       \
    out.why_not = "libdnnl.so.2 has no " #name " (oneDNN 2.x expected)";                    \
    return out;                                                                              \
  }
  PPTRAIN_DNNL_ENTRIES(PPTRAIN_DNNL_FIND)
#undef PPTRAIN_DNNL_FIND
  const dnnl_version_t* v = out.api.dnnl_version();
  if (v->major != DNNL_VERSION_MAJOR) {
    out.why_not = cat("libdnnl.so.2 is oneDNN ", v->major, ".", v->minor, ", built against ", DNNL_VERSION_MAJOR);
    return out;
  }
  out.description = cat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " matmul");
  return out;
}

Availability& availability() {
  static Availability a = decide();
  return a;
}

const Api& api() { return availability().api; }

// Which kernel oneDNN's matmul picks on this CPU, for a small forward product (the choice
// follows the CPU's ISA, not the shape): "" where the library is not available.
const std::string& probe() {
  static const std::string impl = [] {
    Availability& a = availability();
    if (!a.why_not.empty()) return std::string();
    PackedWeights::State state;
    std::string name = state.matmul(PackedWeights::Use::forward, 64, 64, 64, false, false).impl;
    // brgemm reads the packed layout directly; the other matmuls pack again inside (no gain).
    if (name.rfind("brg", 0) != 0)
      a.why_not = cat("oneDNN's matmul runs ", name.empty() ? "an unnamed kernel" : name,
                      " on this CPU, no faster than the GEMM library");
    else
      a.description += cat(", ", name);
    return name;
  }();
  return impl;
}

}  // namespace

const std::string& PackedWeights::why_not() {
  probe();  // once (a static's initialisation): it may add the reason
  return availability().why_not;
}

const std::string& PackedWeights::description() {
  why_not();
  return availability().description;
}

std::unique_ptr<PackedWeights> PackedWeights::make() {
  if (!why_not().empty()) return nullptr;
  return std::unique_ptr<PackedWeights>(new PackedWeights(std::make_unique<State>()));
}

void PackedWeights::hold(bool held) {
  if (held) {
    ++state_->window;
  } else {
    // What stays is what the next window repacks in place (or takes the storage of): the
    // copies this window or the one before it used. The others are freed, so at most one
    // window's worth is ever held unused.
    std::erase_if(state_->packed, [&](const auto& entry) { return entry.second.window + 1 < state_->window; });
  }
  held_ = held;
}

void PackedWeights::run(Use use, float* c, const float* a, const float* w, const float* b, int n, int k, int cols,
                        bool accumulate) {
  PPTRAIN_CHECK(held_, "PackedWeights::run outside Ops::hold_weights");
  const Api& dnnl = api();
  State::Matmul& m = state_->matmul(use, n, k, cols, b != nullptr, accumulate);
  void* weights = state_->packed_weights(use, w, k, cols, m.packed);
  check(dnnl.dnnl_memory_set_data_handle(m.src.get(), const_cast<float*>(a)), "memory_set_data_handle", n, k, cols);
  check(dnnl.dnnl_memory_set_data_handle(m.weights.get(), weights), "memory_set_data_handle", n, k, cols);
  check(dnnl.dnnl_memory_set_data_handle(m.dst.get(), c), "memory_set_data_handle", n, k, cols);
  dnnl_exec_arg_t args[4] = {
      {DNNL_ARG_SRC, m.src.get()}, {DNNL_ARG_WEIGHTS, m.weights.get()}, {DNNL_ARG_DST, m.dst.get()}, {0, nullptr}};
  int nargs = 3;
  if (b) {
    check(dnnl.dnnl_memory_set_data_handle(m.bias.get(), const_cast<float*>(b)), "memory_set_data_handle", n, k,
          cols);
    args[nargs++] = dnnl_exec_arg_t{DNNL_ARG_BIAS, m.bias.get()};
  }
  check(dnnl.dnnl_primitive_execute(m.primitive.get(), state_->stream.get(), nargs, args), "matmul execute", n, k,
        cols);
  check(dnnl.dnnl_stream_wait(state_->stream.get()), "stream_wait", n, k, cols);
}

void PackedWeights::prepare(Use use, const float* w, int n, int k, int cols) {
  PPTRAIN_CHECK(held_, "PackedWeights::prepare outside Ops::hold_weights");
  state_->packed_weights(use, w, k, cols, state_->layout(use, n, k, cols));
}

uint64_t PackedWeights::packings() const { return state_->packings; }

size_t PackedWeights::packed_bytes() const {
  size_t bytes = 0;
  for (const auto& [key, p] : state_->packed) bytes += p.bytes;
  return bytes;
}

#else  // built without oneDNN 2's header: the linear layers run on the GEMM library

struct PackedWeights::State {};

const std::string& PackedWeights::why_not() {
  static const std::string why = "built without oneDNN 2.x's header (install libdnnl-dev and rebuild)";
  return why;
}
const std::string& PackedWeights::description() {
  static const std::string none;
  return none;
}
std::unique_ptr<PackedWeights> PackedWeights::make() { return nullptr; }
void PackedWeights::hold(bool held) { held_ = held; }
void PackedWeights::run(Use, float*, const float*, const float*, const float*, int, int, int, bool) {
  fail("PackedWeights::run in a build without oneDNN");
}
void PackedWeights::prepare(Use, const float*, int, int, int) { fail("PackedWeights::prepare in a build without oneDNN"); }
uint64_t PackedWeights::packings() const { return 0; }
size_t PackedWeights::packed_bytes() const { return 0; }

#endif

PackedWeights::PackedWeights(std::unique_ptr<State> state) : state_(std::move(state)) {}
PackedWeights::~PackedWeights() = default;

}  // namespace pptrain::cpu
