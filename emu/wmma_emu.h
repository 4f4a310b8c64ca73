// nvcuda::wmma under the SIMT emulator (included by emu.h): the 16×16×16 shape with bf16
// inputs and fp32 accumulators, the subset of <mma.h> the kernels use.
//
// Semantics kept from the hardware:
//  - load_matrix_sync, store_matrix_sync and mma_sync are warp collectives: all 32 lanes of
//    the warp must call them with the same arguments (pointer, leading dimension, layout).
//    A lane that does not arrive is a deadlock, a lane at another collective a disagreement,
//    different pointers or strides a fault: all reported as KernelFault by the launch.
//  - the pointer must be 256-bit aligned and ldm a multiple of 16 bytes (8 bf16, 4 floats).
//  - which matrix element a lane holds in frag.x[i] is unspecified on hardware, so here it
//    is a deliberately scrambled bijection (lane, i) <-> (row, col), different for matrix_a,
//    matrix_b and the accumulator. Element-wise code over all x[i] (scaling, conversion,
//    fill) stays correct; code that assumes a mapping computes wrong results.
//  - mma_sync accumulates in fp32: a bf16×bf16 product is exact in fp32 (8+8 significant
//    bits), each sum is rounded to fp32, in ascending k (the hardware order is unspecified).
// fill_fragment and element-wise access are per lane, as on hardware.
#pragma once

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
constexpr int kDim = 16, kElements = 8;  // 16×16 = 256 elements over 32 lanes

// The matrix element (row·16 + col) that lane `lane` holds in x[i], for each fragment use.
// e ↦ (a·e + c) mod 256 with odd a is a bijection of 0..255; each use has its own (a, c).
template <typename Use>
constexpr int element_of(int lane, int i) {
  constexpr int a = std::is_same_v<Use, matrix_a> ? 77 : std::is_same_v<Use, matrix_b> ? 149 : 203;
  constexpr int c = std::is_same_v<Use, matrix_a> ? 19 : std::is_same_v<Use, matrix_b> ? 101 : 58;
  return (a * (lane * kElements + i) + c) % (kDim * kDim);
}
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "emulated wmma: only the 16x16x16 shape");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float> : std::is_same_v<T, __nv_bfloat16>,
                "emulated wmma: matrix_a/matrix_b are __nv_bfloat16, the accumulator float");
  static_assert(std::is_same_v<Use, accumulator> == std::is_same_v<Layout, void>,
                "emulated wmma: matrix_a/matrix_b take row_major or col_major, the accumulator none");

 public:
  using use = Use;
  using element_type = T;
  using layout = Layout;
  static constexpr int num_elements = detail::kElements;
  T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const T& v) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = v;
}

namespace detail {

inline float as_float(float v) { return v; }
inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Offset in memory of logical element (r, c) of a matrix stored row- or column-major.
inline size_t offset(int r, int c, unsigned ldm, bool col) { return col ? size_t(c) * ldm + r : size_t(r) * ldm + c; }

// One lane's arguments to a load or a store.
template <typename Frag, typename P>
struct MemoryArgs {
  Frag* frag;
  P* ptr;
  unsigned ldm;
  bool col;
};

template <typename Args>
void check_same(void* const* lanes, const char* name) {
  const auto* first = static_cast<const Args*>(lanes[0]);
  for (int l = 1; l < 32; ++l) {
    const auto* a = static_cast<const Args*>(lanes[l]);
    if (a->ptr != first->ptr || a->ldm != first->ldm || a->col != first->col)
      ::pptrain::emu::detail::fault(std::string(name) + ": lanes 0 and " + std::to_string(l) +
                                    " pass different pointers, strides or layouts");
  }
  using P = std::remove_const_t<std::remove_pointer_t<decltype(first->ptr)>>;
  ::pptrain::emu::detail::check_aligned(first->ptr, 32, name);  // 256-bit aligned
  if (first->ldm * sizeof(P) % 16 != 0)
    ::pptrain::emu::detail::fault(std::string(name) + ": ldm " + std::to_string(first->ldm) +
                                  " is not a multiple of 16 bytes");
}

template <typename Frag, typename P>
void load_all(void* const* lanes) {
  using Args = MemoryArgs<Frag, const P>;
  check_same<Args>(lanes, "wmma::load_matrix_sync");
  const auto* first = static_cast<const Args*>(lanes[0]);
  for (int l = 0; l < 32; ++l) {
    Frag* f = static_cast<const Args*>(lanes[l])->frag;
    for (int i = 0; i < kElements; ++i) {
      int e = element_of<typename Frag::use>(l, i);
      f->x[i] = first->ptr[offset(e / kDim, e % kDim, first->ldm, first->col)];
    }
  }
}

template <typename Frag>
void store_all(void* const* lanes) {
  using Args = MemoryArgs<const Frag, float>;
  check_same<Args>(lanes, "wmma::store_matrix_sync");
  const auto* first = static_cast<const Args*>(lanes[0]);
  for (int l = 0; l < 32; ++l) {
    const Frag* f = static_cast<const Args*>(lanes[l])->frag;
    for (int i = 0; i < kElements; ++i) {
      int e = element_of<accumulator>(l, i);
      first->ptr[offset(e / kDim, e % kDim, first->ldm, first->col)] = f->x[i];
    }
  }
}

// Gathers a whole 16×16 matrix from the 32 lanes' fragments (fragment pointers per lane).
template <typename Use, typename Frag>
void gather(float out[kDim * kDim], Frag* const* frags) {
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < kElements; ++i) out[element_of<Use>(l, i)] = as_float(frags[l]->x[i]);
}

template <typename FragD, typename FragA, typename FragB, typename FragC>
struct MmaArgs {
  FragD* d;
  const FragA* a;
  const FragB* b;
  const FragC* c;
};

// D = A·B + C for the whole warp; D may alias C (read everything before writing).
template <typename FragD, typename FragA, typename FragB, typename FragC>
void mma_all(void* const* lanes) {
  using Args = MmaArgs<FragD, FragA, FragB, FragC>;
  const FragA* as[32];
  const FragB* bs[32];
  const FragC* cs[32];
  for (int l = 0; l < 32; ++l) {
    const auto* a = static_cast<const Args*>(lanes[l]);
    as[l] = a->a, bs[l] = a->b, cs[l] = a->c;
  }
  float a[kDim * kDim], b[kDim * kDim], c[kDim * kDim];
  gather<matrix_a>(a, as);
  gather<matrix_b>(b, bs);
  gather<accumulator>(c, cs);
  float d[kDim * kDim];
  for (int r = 0; r < kDim; ++r)
    for (int n = 0; n < kDim; ++n) {
      float acc = c[r * kDim + n];
      for (int k = 0; k < kDim; ++k) acc += a[r * kDim + k] * b[k * kDim + n];  // exact product
      d[r * kDim + n] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    FragD* out = static_cast<const Args*>(lanes[l])->d;
    for (int i = 0; i < kElements; ++i) out->x[i] = d[element_of<accumulator>(l, i)];
  }
}

}  // namespace detail

// matrix_a / matrix_b from memory laid out as the fragment's Layout.
template <typename Use, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L>& f, const __nv_bfloat16* ptr,
                             unsigned ldm) {
  using Frag = fragment<Use, 16, 16, 16, __nv_bfloat16, L>;
  detail::MemoryArgs<Frag, const __nv_bfloat16> args{&f, ptr, ldm, std::is_same_v<L, col_major>};
  ::pptrain::emu::detail::warp_matrix_collective("wmma::load_matrix_sync", &args,
                                                 detail::load_all<Frag, __nv_bfloat16>);
}

// An accumulator from memory in the given layout.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* ptr, unsigned ldm,
                             layout_t layout) {
  using Frag = fragment<accumulator, 16, 16, 16, float>;
  detail::MemoryArgs<Frag, const float> args{&f, ptr, ldm, layout == mem_col_major};
  ::pptrain::emu::detail::warp_matrix_collective("wmma::load_matrix_sync", &args,
                                                 detail::load_all<Frag, float>);
}

inline void store_matrix_sync(float* ptr, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  using Frag = fragment<accumulator, 16, 16, 16, float>;
  detail::MemoryArgs<const Frag, float> args{&f, ptr, ldm, layout == mem_col_major};
  ::pptrain::emu::detail::warp_matrix_collective("wmma::store_matrix_sync", &args, detail::store_all<Frag>);
}

template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  using FragC = fragment<accumulator, 16, 16, 16, float>;
  using FragA = fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>;
  using FragB = fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>;
  detail::MmaArgs<FragC, FragA, FragB, FragC> args{&d, &a, &b, &c};
  ::pptrain::emu::detail::warp_matrix_collective("wmma::mma_sync", &args,
                                                 detail::mma_all<FragC, FragA, FragB, FragC>);
}

}  // namespace nvcuda::wmma
