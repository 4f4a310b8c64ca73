// Embedding forward and the deterministic wgrad under the SIMT emulator vs. the cpu
// backend: vocabulary shards with tokens inside and outside, repeated tokens, several token
// tiles and vocabulary slices, more sort entries than the scan has threads, fp32 and bf16,
// in both fiber orders. The wgrad adds each element's rows in row order after its initial
// value, as the cpu op does, so dwte must be the cpu op's bits; its workspace starts as
// garbage (the sort must not rely on its contents) and must stay inside its size.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "embedding.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

struct Shape {
  int b, t, c;
  int vocab;   // token ids are drawn from [0, vocab)
  int v0, vl;  // the shard
  bool with_positions;
};

// `given`: the token ids (n of them), else random ids from [0, vocab).
template <typename T>
void check_embedding(const Shape& s, const std::vector<int32_t>* given = nullptr) {
  SCOPED_TRACE(::testing::Message() << "b=" << s.b << " t=" << s.t << " c=" << s.c << " shard ["
                                    << s.v0 << "," << s.v0 + s.vl << ")");
  auto cpu = make_cpu_ops();
  int n = s.b * s.t;
  size_t nc = size_t(n) * s.c;
  std::vector<int32_t> tokens = given ? *given : random_ints(n, 31, 0, s.vocab - 1);
  ASSERT_EQ(tokens.size(), size_t(n));
  std::vector<float> wte = representable<T>(random_floats(size_t(s.vl) * s.c, 32));
  std::vector<float> wpe = representable<T>(random_floats(size_t(s.t) * s.c, 33));
  std::vector<float> dy = representable<T>(random_floats(nc, 34));
  std::vector<float> dwte_init = random_floats(size_t(s.vl) * s.c, 35);
  std::vector<float> dwpe_init = random_floats(size_t(s.t) * s.c, 36);
  const float* wpe_ptr = s.with_positions ? wpe.data() : nullptr;

  std::vector<float> y(nc), dwte = dwte_init, dwpe = dwpe_init;
  cpu->embedding_forward(y.data(), tokens.data(), wte.data(), wpe_ptr, n, s.t, s.c, s.v0, s.vl);
  cpu->embedding_backward_weight(dwte.data(), s.with_positions ? dwpe.data() : nullptr, dy.data(),
                                 tokens.data(), n, s.t, s.c, s.v0, s.vl);

  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<int32_t> gtokens(tokens);
    Guarded<T> gwte(store_as<T>(wte)), gwpe(store_as<T>(wpe)), gdy(store_as<T>(dy));
    Guarded<T> gy{std::vector<T>(nc)};
    Guarded<float> gdwte(dwte_init), gdwpe(dwpe_init);
    Guarded<int32_t> gwork(random_ints(embedding_backward_weight_workspace_bytes(n, s.vl) / sizeof(int32_t), 37,
                                       -1000000, 1000000));
    launch_embedding_forward<T>(ctx, gy.data(), gtokens.data(), gwte.data(),
                                s.with_positions ? gwpe.data() : nullptr, n, s.t, s.c, s.v0, s.vl);
    launch_embedding_backward_weight<T>(ctx, gdwte.data(), s.with_positions ? gdwpe.data() : nullptr,
                                        gdy.data(), gtokens.data(), gwork.data(), n, s.t, s.c, s.v0, s.vl);
    EXPECT_TRUE(gwork.guards_intact()) << "the wgrad wrote outside its workspace";
    return std::vector<std::vector<float>>{checked(gy, "y"), checked(gdwte, "dwte"),
                                           checked(gdwpe, "dwpe")};
  });
  // y is a sum of two stored values: exact in fp32, one rounding in bf16.
  EXPECT_TRUE(close_as<T>(out[0], y)) << "y";
  EXPECT_TRUE(close(out[1], dwte, false)) << "dwte";
  EXPECT_TRUE(out[1] == dwte) << "dwte: not the bits of the rows added in row order";
  EXPECT_TRUE(close(out[2], dwpe, false)) << "dwpe";
}

}  // namespace

TEST(KernelsEmbedding, FullVocabularyFp32) {
  check_embedding<float>({3, 13, 100, 70, 0, 70, true});  // C % 4 == 0: vector forward
  check_embedding<float>({2, 7, 37, 50, 0, 50, true});    // scalar forward
}

TEST(KernelsEmbedding, VocabularyShardFp32) {
  // Tokens below, inside and above the shard; no position table (a later shard's call).
  check_embedding<float>({3, 13, 40, 200, 50, 70, false});
  check_embedding<float>({3, 13, 40, 200, 50, 70, true});
}

TEST(KernelsEmbedding, ManyTokensAndSlicesFp32) {
  // 1100 rows: two shared-memory token tiles; 700 vocabulary rows: two wgrad slices; ids
  // from a 40-token range repeat ~27 times each, so the row order of the sums matters.
  check_embedding<float>({4, 275, 24, 40, 0, 700, true});
  check_embedding<float>({2, 550, 24, 1400, 650, 700, true});
}

TEST(KernelsEmbedding, Bf16) {
  check_embedding<bf16>({3, 13, 96, 200, 50, 70, true});  // C % 8 == 0: vector forward
  check_embedding<bf16>({3, 13, 100, 70, 0, 70, true});   // scalar forward
}

TEST(KernelsEmbedding, RepeatedIdsInOneSliceAreAddedInRowOrder) {
  // What a corpus of few symbols gives: every id inside one 32-row vocabulary slice, and one
  // id only; more hits per 32-row group than a prefetch batch holds, over several token
  // tiles. The slice's sums are kept in shared memory and the hits' dy loaded ahead, yet
  // each element must still be its initial value plus its rows in row order: the cpu op's
  // bits exactly, fp32 and bf16.
  const int b = 4, t = 300, n = b * t;  // 1200 rows: two token tiles
  std::vector<int32_t> few(n), one(n, 37);
  for (int i = 0; i < n; ++i) few[i] = 32 + (i * 7) % 5;  // ids 32..36: one slice
  check_embedding<float>({b, t, 40, 0, 0, 100, true}, &few);
  check_embedding<float>({b, t, 40, 0, 0, 100, true}, &one);
  check_embedding<float>({b, t, 300, 0, 0, 100, false}, &one);  // two channel blocks
  check_embedding<bf16>({b, t, 40, 0, 0, 100, true}, &few);
}

TEST(KernelsEmbedding, MoreSortEntriesThanScanThreadsAndSlicesWithoutTokens) {
  // 1100 rows (5 chunks of 256) over a 7000-id shard (219 slices of 32): 1095 entries of
  // the slice-by-chunk counts, so scan threads sum runs of 2; most slices hold no token and
  // their dwte rows must stay untouched (ids from [0, 2000): the shard [1000, 8000) sees
  // them in 32 of its slices; every row beyond keeps its initial value, bit for bit).
  check_embedding<float>({4, 275, 8, 2000, 1000, 7000, false});
  check_embedding<bf16>({4, 275, 8, 2000, 1000, 7000, true});
}
