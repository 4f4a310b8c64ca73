// Attention kernels under the SIMT emulator. The permutes and the causal softmax pieces are
// composed with host GEMMs (standing in for cuBLAS) into the full attention forward and
// backward of attention.cuh, and compared with the cpu backend's attention_forward /
// attention_backward_input, in both fiber orders. The bf16 instantiations are compared with
// the fp32 kernels on the same (bf16-exact) inputs.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attention.cuh"
#include "backend/ops.h"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

// Batched GEMM in double over `batch` matrices: c[m,n] = Σ_k A[m,k] B[k,n], where A is
// stored [m,k] (or [k,m] when a_transposed) and B is stored [k,n] (or [n,k] when
// b_transposed).
std::vector<float> matmul(const std::vector<float>& a, bool a_transposed, const std::vector<float>& b,
                          bool b_transposed, int batch, int m, int n, int k) {
  std::vector<float> c(size_t(batch) * m * n);
  for (int z = 0; z < batch; ++z)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int p = 0; p < k; ++p) {
          float x = a_transposed ? a[(size_t(z) * k + p) * m + i] : a[(size_t(z) * m + i) * k + p];
          float y = b_transposed ? b[(size_t(z) * n + j) * k + p] : b[(size_t(z) * k + p) * n + j];
          s += double(x) * y;
        }
        c[(size_t(z) * m + i) * n + j] = float(s);
      }
  return c;
}

using Outputs = std::vector<std::vector<float>>;

void check_attention(int b, int t, int nh, int hd) {
  SCOPED_TRACE(::testing::Message() << "b=" << b << " t=" << t << " nh=" << nh << " hd=" << hd);
  auto cpu = make_cpu_ops();
  int bh = b * nh;
  size_t head_elems = size_t(bh) * t * hd, score_elems = size_t(bh) * t * t;
  std::vector<float> qkv = random_floats(3 * head_elems, 41, -1.5f, 1.5f);
  std::vector<float> dout = random_floats(head_elems, 42);
  std::vector<float> out(head_elems), probs(score_elems), dqkv(3 * head_elems);
  cpu->attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, hd);
  cpu->attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), b, t, nh, hd);
  float scale = 1.0f / std::sqrt(float(hd));

  Outputs got = run_both_orders([&](const LaunchContext& ctx) {
    // forward
    Guarded<float> gqkv(qkv), q{std::vector<float>(head_elems)}, k{std::vector<float>(head_elems)},
        v{std::vector<float>(head_elems)};
    launch_attention_permute<float>(ctx, q.data(), k.data(), v.data(), gqkv.data(), b, t, nh, hd);
    Guarded<float> scores(matmul(q.values(), false, k.values(), true, bh, t, t, hd));
    Guarded<float> gprobs{std::vector<float>(score_elems)};
    launch_attention_softmax_forward<float>(ctx, gprobs.data(), scores.data(), bh, t, scale);
    launch_attention_softmax_forward<float>(ctx, scores.data(), scores.data(), bh, t, scale);
    Guarded<float> y(matmul(gprobs.values(), false, v.values(), false, bh, t, hd, t));
    Guarded<float> gout{std::vector<float>(head_elems)};
    launch_attention_unpermute<float>(ctx, gout.data(), y.data(), b, t, nh, hd);
    // backward
    Guarded<float> gdout(dout), dy{std::vector<float>(head_elems)};
    launch_attention_unpermute_backward<float>(ctx, dy.data(), gdout.data(), b, t, nh, hd);
    Guarded<float> dprobs(matmul(dy.values(), false, v.values(), true, bh, t, t, hd));
    std::vector<float> dv = matmul(gprobs.values(), true, dy.values(), false, bh, t, hd, t);
    Guarded<float> dscores{std::vector<float>(score_elems)};
    launch_attention_softmax_backward<float>(ctx, dscores.data(), dprobs.data(), gprobs.data(), bh,
                                             t, scale);
    launch_attention_softmax_backward<float>(ctx, dprobs.data(), dprobs.data(), gprobs.data(), bh,
                                             t, scale);
    Guarded<float> dq(matmul(dscores.values(), false, k.values(), false, bh, t, hd, t));
    Guarded<float> dk(matmul(dscores.values(), true, q.values(), false, bh, t, hd, t));
    Guarded<float> gdv(dv), gdqkv(std::vector<float>(3 * head_elems, NAN));
    launch_attention_permute_backward<float>(ctx, gdqkv.data(), dq.data(), dk.data(), gdv.data(), b,
                                             t, nh, hd);
    return Outputs{checked(gout, "out"),        checked(gprobs, "probs"),
                   checked(scores, "probs in place"), checked(gdqkv, "dqkv"),
                   checked(dscores, "dscores"), checked(dprobs, "dscores in place"),
                   checked(q, "q"), checked(k, "k"), checked(v, "v")};
  });
  EXPECT_TRUE(close(got[0], out, false)) << "attention out";
  EXPECT_TRUE(close(got[1], probs, false)) << "probs";
  EXPECT_TRUE(bitwise_equal({got[2]}, {got[1]})) << "softmax in place";
  EXPECT_TRUE(close(got[3], dqkv, false)) << "dqkv";
  EXPECT_TRUE(bitwise_equal({got[5]}, {got[4]})) << "softmax backward in place";
}

// bf16 instantiations vs. the fp32 kernels (validated above) on bf16-exact inputs: the
// permutes move values (bit-exact); the softmax kernels compute in fp32 and round once.
void check_bf16_pieces(int b, int t, int nh, int hd) {
  SCOPED_TRACE(::testing::Message() << "b=" << b << " t=" << t << " nh=" << nh << " hd=" << hd);
  int bh = b * nh;
  size_t head_elems = size_t(bh) * t * hd, score_elems = size_t(bh) * t * t;
  std::vector<float> qkv = representable<bf16>(random_floats(3 * head_elems, 51, -1.5f, 1.5f));
  std::vector<float> scores = representable<bf16>(random_floats(score_elems, 52, -4.0f, 4.0f));
  std::vector<float> probs = representable<bf16>(random_floats(score_elems, 53, 0.0f, 1.0f));
  std::vector<float> dprobs = representable<bf16>(random_floats(score_elems, 54));
  float scale = 0.3f;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    return run_both_orders([&](const LaunchContext& ctx) {
      Guarded<T> gqkv(store_as<T>(qkv)), q{std::vector<T>(head_elems)}, k{std::vector<T>(head_elems)},
          v{std::vector<T>(head_elems)}, back{std::vector<T>(3 * head_elems)};
      launch_attention_permute<T>(ctx, q.data(), k.data(), v.data(), gqkv.data(), b, t, nh, hd);
      launch_attention_permute_backward<T>(ctx, back.data(), q.data(), k.data(), v.data(), b, t, nh, hd);
      Guarded<T> heads{std::vector<T>(head_elems)}, rows{std::vector<T>(head_elems)};
      launch_attention_unpermute_backward<T>(ctx, heads.data(), q.data(), b, t, nh, hd);
      launch_attention_unpermute<T>(ctx, rows.data(), heads.data(), b, t, nh, hd);
      Guarded<T> gscores(store_as<T>(scores)), gprobs(store_as<T>(probs)), gdprobs(store_as<T>(dprobs));
      Guarded<T> soft{std::vector<T>(score_elems)}, dscores{std::vector<T>(score_elems)};
      launch_attention_softmax_forward<T>(ctx, soft.data(), gscores.data(), bh, t, scale);
      launch_attention_softmax_backward<T>(ctx, dscores.data(), gdprobs.data(), gprobs.data(), bh, t, scale);
      return Outputs{checked(q, "q"), checked(back, "qkv round trip"), checked(rows, "unpermute round trip"),
                     checked(soft, "softmax"), checked(dscores, "softmax backward")};
    });
  };
  Outputs got = run(bf16{}), ref = run(0.0f);
  EXPECT_TRUE(bitwise_equal({got[0]}, {ref[0]})) << "permute";
  EXPECT_TRUE(bitwise_equal({got[1]}, {qkv})) << "permute_backward undoes permute";
  EXPECT_TRUE(bitwise_equal({got[2]}, {ref[0]})) << "unpermute undoes unpermute_backward";
  EXPECT_TRUE(close(got[3], ref[3], true)) << "softmax forward";
  EXPECT_TRUE(close(got[4], ref[4], true)) << "softmax backward";
}

}  // namespace

TEST(KernelsAttention, ComposedForwardBackwardMatchesCpu) {
  check_attention(2, 13, 3, 8);  // rows shorter than a warp
  check_attention(1, 37, 2, 4);  // lanes with two columns; 74 rows: a partial block of warps
}

TEST(KernelsAttention, Bf16Pieces) { check_bf16_pieces(2, 37, 2, 8); }
