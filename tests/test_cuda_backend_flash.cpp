// CudaOps::flash_attention_forward / flash_attention_backward_input on the emulated cuda
// backend (caching allocator, stream, dispatch on the views' dtype, flash kernels under the
// SIMT emulator): fp32 against the cpu backend's naive attention, bf16 bit for bit against
// the bf16 kernel launched directly (dispatch hands the views over as the right T* in the
// right order). The kernels' accuracy is tested in test_kernels_flash_attention.cpp.
#define PPTRAIN_EMULATED 1  // this binary links the emulated cuda backend

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"
#include "emu/emu.h"
#include "flash_attention.cuh"
#include "support/cpu_ops_util.h"

using namespace pptrain;
using pptrain::testing::normalized_error;
using pptrain::testing::random_floats;

namespace {

struct Shape {
  int b = 2, t = 19, nh = 2, hd = 32;
  size_t elems() const { return size_t(b) * t * nh * hd; }
  size_t stats() const { return size_t(b) * nh * t; }
};

// Device buffers of one backend, freed at scope exit.
class Buffers {
 public:
  explicit Buffers(Ops& ops) : ops_(ops) {}
  ~Buffers() {
    for (void* p : owned_) ops_.release(p);
  }
  template <typename T>
  T* put(const std::vector<T>& host) {
    void* p = ops_.allocate(host.size() * sizeof(T));
    ops_.copy_to_device(p, host.data(), host.size() * sizeof(T));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> v(n);
    ops_.copy_to_host(v.data(), p, n * sizeof(T));
    return v;
  }

 private:
  Ops& ops_;
  std::vector<void*> owned_;
};

}  // namespace

// Normwise 1e-5: see the fp32 bound of test_kernels_flash_attention.cpp.
TEST(CudaBackendFlash, Fp32MatchesCpuNaiveAttention) {
  Shape s;
  std::vector<float> qkv = random_floats(3 * s.elems(), 91, -1.5f, 1.5f), dout = random_floats(s.elems(), 92);
  auto cpu = make_cpu_ops();
  std::vector<float> out(s.elems()), probs(s.stats() * s.t), dqkv(3 * s.elems());
  cpu->attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
  cpu->attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), s.b, s.t, s.nh, s.hd);

  auto cuda = make_cuda_ops(0);
  Buffers d(*cuda);
  float* d_qkv = d.put(qkv);
  float* d_dout = d.put(dout);
  float* d_out = d.put(std::vector<float>(s.elems()));
  float* d_lse = d.put(std::vector<float>(s.stats()));
  float* d_delta = d.put(std::vector<float>(s.stats()));
  float* d_dqkv = d.put(random_floats(3 * s.elems(), 93));  // overwritten, not accumulated
  cuda->flash_attention_forward(d_out, d_lse, d_qkv, s.b, s.t, s.nh, s.hd);
  cuda->flash_attention_backward_input(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, s.b, s.t, s.nh, s.hd);
  EXPECT_LE(normalized_error(d.get(d_out, s.elems()), out), 1e-5);
  EXPECT_LE(normalized_error(d.get(d_dqkv, 3 * s.elems()), dqkv), 1e-5);
  EXPECT_EQ(static_cast<cuda::CudaOps&>(*cuda).compute_stream()->launches, 4);  // forward, delta, dK/dV, dQ
}

TEST(CudaBackendFlash, Bf16DispatchesToTheBf16Kernels) {
  Shape s;
  auto bf = [](const std::vector<float>& v) {
    std::vector<bfloat16> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = bfloat16::from_float(v[i]);
    return out;
  };
  std::vector<bfloat16> qkv = bf(random_floats(3 * s.elems(), 94, -1.5f, 1.5f)), dout = bf(random_floats(s.elems(), 95));
  auto cuda = make_cuda_ops(0);
  Buffers d(*cuda);
  bfloat16* d_qkv = d.put(qkv);
  bfloat16* d_dout = d.put(dout);
  bfloat16* d_out = d.put(std::vector<bfloat16>(s.elems()));
  bfloat16* d_dqkv = d.put(std::vector<bfloat16>(3 * s.elems()));
  float* d_lse = d.put(std::vector<float>(s.stats()));
  float* d_delta = d.put(std::vector<float>(s.stats()));
  cuda->flash_attention_forward(d_out, d_lse, d_qkv, s.b, s.t, s.nh, s.hd);
  cuda->flash_attention_backward_input(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, s.b, s.t, s.nh, s.hd);

  // The same kernels launched directly on host buffers.
  using kernels::bf16;
  std::vector<bf16> out(s.elems()), dqkv(3 * s.elems());
  std::vector<float> lse(s.stats()), delta(s.stats());
  auto as_kernel = [](const std::vector<bfloat16>& v) { return reinterpret_cast<const bf16*>(v.data()); };
  emu::Stream stream;
  kernels::launch_flash_attention_forward<bf16>({&stream}, out.data(), lse.data(), as_kernel(qkv), s.b, s.t, s.nh, s.hd);
  kernels::launch_flash_attention_backward_input<bf16>({&stream}, dqkv.data(), delta.data(), as_kernel(dout),
                                                       as_kernel(qkv), out.data(), lse.data(), s.b, s.t, s.nh, s.hd);
  ASSERT_EQ(cudaStreamSynchronize(&stream), cudaSuccess);  // launches run on their stream
  std::vector<bfloat16> got_out = d.get(d_out, s.elems()), got_dqkv = d.get(d_dqkv, 3 * s.elems());
  EXPECT_EQ(std::memcmp(got_out.data(), out.data(), out.size() * 2), 0) << "out";
  EXPECT_EQ(std::memcmp(got_dqkv.data(), dqkv.data(), dqkv.size() * 2), 0) << "dqkv";
  EXPECT_EQ(d.get(d_lse, s.stats()), lse) << "lse";
}

TEST(CudaBackendFlash, UnsupportedHeadDimIsOneLine) {
  auto cuda = make_cuda_ops(0);
  Buffers d(*cuda);
  float* buf = d.put(std::vector<float>(3 * 40 * 2));
  try {
    cuda->flash_attention_forward(buf, buf, buf, 1, 2, 1, 40);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "flash attention: head dim 40 is not supported (32, 64, 128)");
  }
}
