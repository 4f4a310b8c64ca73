// Tensor maps for the bulk tensor copy engine (tma.cuh): the host side. On a GPU the map is
// encoded by the driver's cuTensorMapEncodeTiled, reached through the runtime's entry-point
// query (no link against libcuda); under the emulator it is emu::ptx::TensorMap.
#include "tma.cuh"

namespace pptrain::kernels::tma {

#ifdef PPTRAIN_EMULATED

Map make_map_3d(const void* base, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t s1, uint64_t s2, uint32_t b0,
                uint32_t b1) {
  if (b0 * 2 != 128) fail("tensor map: a 128-byte swizzled box row is 64 bf16, not ", b0);
  if (s1 % 16 || s2 % 16 || reinterpret_cast<uintptr_t>(base) % 16)
    fail("tensor map: the base and the strides must be multiples of 16 bytes");
  Map m;
  m.base = base;
  m.rank = 3;
  m.dims[0] = d0, m.dims[1] = d1, m.dims[2] = d2;
  m.strides[0] = 2, m.strides[1] = s1, m.strides[2] = s2;
  m.box[0] = b0, m.box[1] = b1, m.box[2] = 1;
  m.swizzle = 3;
  return m;
}

#else

namespace {
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}
}  // namespace

Map make_map_3d(const void* base, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t s1, uint64_t s2, uint32_t b0,
                uint32_t b1) {
  EncodeTiled encode = encode_tiled();
  if (!encode) fail("tensor map: the driver has no cuTensorMapEncodeTiled (CUDA 12 or later needed)");
  Map m;
  const cuuint64_t dims[3] = {d0, d1, d2}, strides[2] = {s1, s2};
  const cuuint32_t box[3] = {b0, b1, 1}, element_strides[3] = {1, 1, 1};
  CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box,
                      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail("tensor map: cuTensorMapEncodeTiled refused dims {", d0, ", ", d1, ", ", d2, "} strides {", s1, ", ", s2,
         "} box {", b0, ", ", b1, "} (CUresult ", int(r), ")");
  return m;
}

#endif

}  // namespace pptrain::kernels::tma
