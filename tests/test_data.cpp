// The data path: token shards (llm.c format), datasets over shard globs, shuffling,
// layout-independent microbatches and the profile's sample. The Markov source and
// prepare-data: tests/test_prepare_data.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "data/index_permutation.h"
#include "data/shard_set.h"
#include "data/token_dataset.h"
#include "data/token_shard.h"
#include "support/error_of.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::data;
using pptrain::testing::TempDir;
using pptrain::testing::error_of;

namespace {

// A shard file with an arbitrary header and payload, for the bad-input tests.
void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                     const std::vector<uint16_t>& payload) {
  std::vector<int32_t> header(kShardHeaderInts, 0);
  header[0] = magic, header[1] = version, header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
  out.write(reinterpret_cast<const char*>(payload.data()), std::streamsize(payload.size() * 2));
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t first) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(first + i);
  return t;
}

// Sequence `index` of a dataset as one vector: T tokens then T targets.
std::vector<int32_t> sequence(const TokenDataset& ds, uint64_t index) {
  std::vector<int32_t> row(2 * size_t(ds.seq_len()));
  ds.read_sequence(index, row.data(), row.data() + ds.seq_len());
  return row;
}

}  // namespace

// ---- shards ---------------------------------------------------------------------

TEST(TokenShard, WriteReadRoundTripInLlmcLayout) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {0, 1, 255, 256, 50256, 65535, 7};
  write_token_shard(dir.file("a.bin"), tokens);
  EXPECT_EQ(read_token_shard(dir.file("a.bin")), tokens);

  // The bytes on disk are exactly llm.c's: 256 int32 header, then uint16 tokens.
  const std::string bytes = pptrain::testing::read_file(dir.file("a.bin"));
  ASSERT_EQ(bytes.size(), 1024 + 2 * tokens.size());
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], int32_t(tokens.size()));
  uint16_t fifth;
  std::memcpy(&fifth, bytes.data() + 1024 + 2 * 4, 2);
  EXPECT_EQ(fifth, 50256);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.bin.tmp")));

  write_token_shard(dir.file("empty.bin"), {});
  EXPECT_TRUE(read_token_shard(dir.file("empty.bin")).empty());
}

TEST(TokenShard, RejectsBadFilesWithOneLineNamingTheFile) {
  TempDir dir;
  const std::string f = dir.file("bad.bin");
  write_raw_shard(f, 123, 1, 4, {1, 2, 3, 4});
  EXPECT_EQ(error_of([&] { TokenShard(f, 256); }),
            f + ": not a token shard (magic 123, expected 20240520)");

  write_raw_shard(f, kShardMagic, 2, 4, {1, 2, 3, 4});
  EXPECT_EQ(error_of([&] { TokenShard(f, 256); }),
            f + ": unsupported token shard version 2 (expected 1)");

  write_raw_shard(f, kShardMagic, 1, 10, iota_tokens(7, 0));
  EXPECT_EQ(error_of([&] { TokenShard(f, 256); }),
            f + ": truncated token shard (header says 10 tokens but the file holds 7)");

  write_raw_shard(f, kShardMagic, 1, 3, iota_tokens(5, 0));
  EXPECT_EQ(error_of([&] { TokenShard(f, 256); }),
            f + ": oversized token shard (header says 3 tokens but the file holds 5)");

  pptrain::testing::write_file(f, "tiny");
  EXPECT_EQ(error_of([&] { TokenShard(f, 256); }),
            f + ": truncated token shard (4 bytes, smaller than the 1024-byte header)");

  std::vector<uint16_t> tokens = iota_tokens(40, 0);
  tokens[17] = 300;
  tokens[30] = 999;  // the first offender is reported
  write_token_shard(f, tokens);
  EXPECT_EQ(error_of([&] { TokenShard(f, 256).check_all_tokens(); }),
            f + ": token 300 at position 17 is >= model.vocab_size 256");
  EXPECT_NO_THROW(TokenShard(f, 1000).check_all_tokens());
  EXPECT_EQ(error_of([&] { TokenShard(f, 999).check_all_tokens(); }),
            f + ": token 999 at position 30 is >= model.vocab_size 999");

  EXPECT_EQ(error_of([&] { TokenShard(dir.file("none.bin"), 256); }),
            "token shard " + dir.file("none.bin") + ": cannot open (No such file or directory)");
  EXPECT_EQ(error_of([&] { TokenShard(dir.path(), 256); }),
            "token shard " + dir.path() + ": is a directory (expected a regular file)");
  // A FIFO is refused from its stat, never opened (an open would wait for a writer).
  ASSERT_EQ(mkfifo(dir.file("pipe.bin").c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { TokenShard(dir.file("pipe.bin"), 256); }),
            "token shard " + dir.file("pipe.bin") + ": is a FIFO (expected a regular file)");
}

// Shards are read with pread, not mapped: a shard truncated while a run reads it gives one
// line naming the file and the bytes it no longer has. A mapping read zeros from the rest
// of the last page (a silent wrong batch) and died of SIGBUS on a page wholly past the end.
TEST(TokenDataset, ShardTruncatedWhileInUseIsOneLineNamingFileAndOffset) {
  TempDir dir;
  const std::string f = dir.file("train_000.bin");
  std::vector<uint16_t> tokens(4001);  // 9026 bytes: three 4 KiB pages
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 256);
  write_token_shard(f, tokens);
  TokenDataset ds(dir.file("train_*.bin"), 4, 65536, "data.train");  // sequence j at token 4j
  TokenDataset small(dir.file("train_*.bin"), 4, 256, "data.train");
  ASSERT_EQ(ds.num_sequences(), 1000u);
  EXPECT_EQ(sequence(ds, 5)[0], 20);
  EXPECT_EQ(sequence(ds, 999)[0], 3996 % 256);
  // Keep the header and 10 tokens (1044 bytes, inside the first page).
  std::filesystem::resize_file(f, 1024 + 2 * 10);
  // Sequence 5: tokens [20, 25), bytes [1064, 1074), in the first page's tail.
  EXPECT_EQ(error_of([&] { sequence(ds, 5); }),
            f + ": truncated while in use (now 1044 bytes; reading bytes [1064, 1074))");
  // Sequence 999: tokens [3996, 4001), bytes [9016, 9026), on the third page.
  EXPECT_EQ(error_of([&] { sequence(ds, 999); }),
            f + ": truncated while in use (now 1044 bytes; reading bytes [9016, 9026))");
  EXPECT_EQ(sequence(ds, 1)[0], 4);  // what is still there reads as before
  // A token rewritten out of the vocabulary after the open is caught by the read.
  {
    std::fstream out(f, std::ios::in | std::ios::out | std::ios::binary);
    const uint16_t bad = 300;
    out.seekp(1024 + 2 * 6);
    out.write(reinterpret_cast<const char*>(&bad), 2);
  }
  EXPECT_EQ(error_of([&] { sequence(small, 1); }), f + ": token 300 at position 6 is >= model.vocab_size 256");
}

// ---- datasets -------------------------------------------------------------------

TEST(TokenDataset, IndexesSequencesAcrossShardsInNameOrder) {
  TempDir dir;
  // Written out of name order; shard 1 is too short for one sequence of T+1 = 5 tokens.
  write_token_shard(dir.file("train_002.bin"), iota_tokens(17, 3000));  // 4 sequences
  write_token_shard(dir.file("train_000.bin"), iota_tokens(12, 1000));  // 2 sequences, not 3
  write_token_shard(dir.file("train_001.bin"), iota_tokens(3, 2000));   // 0 sequences
  write_token_shard(dir.file("other.bin"), iota_tokens(50, 0));         // not matched
  const int T = 4;
  TokenDataset ds(dir.file("train_*.bin"), T, 65536, "data.train");
  ASSERT_EQ(ds.num_shards(), 3u);
  EXPECT_EQ(ds.shard(0).path(), dir.file("train_000.bin"));
  EXPECT_EQ(ds.num_tokens(), 32u);
  ASSERT_EQ(ds.num_sequences(), 6u);

  // Sequence j of a shard starts at j·T; targets are the inputs shifted by one.
  const std::vector<std::pair<int, int>> expected_start = {{1000, 0}, {1004, 0}, {3000, 0},
                                                           {3004, 0}, {3008, 0}, {3012, 0}};
  for (uint64_t index = 0; index < 3 * ds.num_sequences(); ++index) {
    std::vector<int32_t> row = sequence(ds, index);
    const int start = expected_start[index % 6].first;
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(row[t], start + t) << "index " << index << " t " << t;
      EXPECT_EQ(row[T + t], start + t + 1) << "index " << index << " t " << t;
    }
  }
}

TEST(TokenDataset, RejectsBadInputNamingKeyOrFile) {
  TempDir dir;
  const std::string glob = dir.file("x_*.bin");
  EXPECT_EQ(error_of([&] { TokenDataset(glob, 4, 256, "data.train"); }),
            "data.train: no file matches '" + glob + "'");

  // A bad shard anywhere in the glob is reported by its own name.
  write_token_shard(dir.file("x_0.bin"), iota_tokens(20, 0));
  std::vector<uint16_t> bad = iota_tokens(20, 0);
  bad[5] = 256;
  write_token_shard(dir.file("x_1.bin"), bad);
  EXPECT_EQ(error_of([&] { TokenDataset(glob, 4, 256, "data.val").check_all_tokens(); }),
            dir.file("x_1.bin") + ": token 256 at position 5 is >= model.vocab_size 256");

  std::filesystem::remove(dir.file("x_1.bin"));
  EXPECT_EQ(error_of([&] { TokenDataset(glob, 32, 256, "data.val"); }),
            "data.val: no shard matching '" + glob +
                "' holds one sequence of model.seq_len + 1 = 33 tokens (1 shard(s), 20 tokens in all)");
}

TEST(IndexPermutation, IsABijectionAndDependsOnSeedAndEpoch) {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 1000ull, 4097ull}) {
    std::vector<uint64_t> image(n);
    std::vector<bool> seen(n, false);
    IndexPermutation perm(n, 42, 3);
    for (uint64_t i = 0; i < n; ++i) {
      image[i] = perm(i);
      ASSERT_LT(image[i], n);
      ASSERT_FALSE(seen[image[i]]) << "n " << n << ": " << image[i] << " hit twice";
      seen[image[i]] = true;
    }
    if (n < 64) continue;
    size_t fixed_points = 0, same_as_next_epoch = 0, same_as_other_seed = 0;
    IndexPermutation next_epoch(n, 42, 4), other_seed(n, 43, 3), again(n, 42, 3);
    for (uint64_t i = 0; i < n; ++i) {
      EXPECT_EQ(again(i), image[i]);
      fixed_points += image[i] == i;
      same_as_next_epoch += next_epoch(i) == image[i];
      same_as_other_seed += other_seed(i) == image[i];
    }
    // A random permutation agrees with another on about one position.
    EXPECT_LT(fixed_points, 8u) << n;
    EXPECT_LT(same_as_next_epoch, 8u) << n;
    EXPECT_LT(same_as_other_seed, 8u) << n;
  }
}

TEST(TokenDataset, ShuffleIsADeterministicPermutationPerEpoch) {
  TempDir dir;
  write_token_shard(dir.file("s_0.bin"), iota_tokens(301, 0));
  write_token_shard(dir.file("s_1.bin"), iota_tokens(200, 10000));
  const int T = 5;
  TokenDataset plain(dir.file("s_*.bin"), T, 65536, "data.train");
  TokenDataset shuffled(dir.file("s_*.bin"), T, 65536, "data.train", true, 1234);
  TokenDataset same(dir.file("s_*.bin"), T, 65536, "data.train", true, 1234);
  TokenDataset other(dir.file("s_*.bin"), T, 65536, "data.train", true, 99);
  const uint64_t N = plain.num_sequences();
  ASSERT_EQ(N, 60u + 39u);

  std::map<std::vector<int32_t>, uint64_t> position_of;  // content -> unshuffled index
  for (uint64_t i = 0; i < N; ++i) position_of[sequence(plain, i)] = i;
  ASSERT_EQ(position_of.size(), N);

  std::vector<std::vector<uint64_t>> order(3);  // per epoch
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<uint64_t> visited;
    for (uint64_t i = epoch * N; i < (epoch + 1) * N; ++i) {
      std::vector<int32_t> row = sequence(shuffled, i);
      ASSERT_TRUE(position_of.count(row)) << "index " << i << " is not a sequence of the data";
      EXPECT_EQ(position_of[row], shuffled.resolve(i));
      visited.insert(position_of[row]);
      order[epoch].push_back(position_of[row]);
      EXPECT_EQ(sequence(same, i), row) << "index " << i;
    }
    EXPECT_EQ(visited.size(), N) << "epoch " << epoch << " is not a permutation";
  }
  std::vector<uint64_t> identity(N), other_order(N);
  for (uint64_t i = 0; i < N; ++i) identity[i] = i, other_order[i] = other.resolve(i);
  EXPECT_NE(order[0], identity);
  EXPECT_NE(order[0], order[1]);
  EXPECT_NE(order[1], order[2]);
  EXPECT_NE(order[0], other_order);
}

// The union over (dp_rank, microbatch) of read_microbatch rows is the global batch of the
// single-process run (dp = 1, microbatches = m·dp), row for row, for every step, also
// across epoch boundaries and with shuffling.
TEST(TokenDataset, MicrobatchesOfAnyLayoutFormTheSameGlobalBatch) {
  TempDir dir;
  write_token_shard(dir.file("t_0.bin"), iota_tokens(97, 0));
  write_token_shard(dir.file("t_1.bin"), iota_tokens(64, 500));
  const int T = 7;
  for (bool shuffle : {false, true}) {
    TokenDataset ds(dir.file("t_*.bin"), T, 65536, "data.train", shuffle, 5);
    ASSERT_EQ(ds.num_sequences(), 13u + 9u);
    const int G = 12;  // global batch, 22 sequences: steps cross epochs at odd places
    struct Layout { int batch, microbatches, dp; };
    const std::vector<Layout> layouts = {{3, 2, 2}, {3, 4, 1}, {1, 3, 4}, {6, 1, 2}, {2, 1, 6}, {12, 1, 1}};
    for (uint64_t step = 0; step < 5; ++step) {
      // Reference: the single-process run with B = 3, m = 4.
      std::vector<int32_t> ref_tokens(G * T), ref_targets(G * T);
      for (int j = 0; j < 4; ++j)
        read_microbatch(ds, step, 0, 1, j, 4, 3, ref_tokens.data() + j * 3 * T,
                        ref_targets.data() + j * 3 * T);
      for (int r = 0; r < G; ++r) {
        std::vector<int32_t> row = sequence(ds, step * G + r);
        ASSERT_TRUE(std::equal(row.begin(), row.begin() + T, ref_tokens.begin() + r * T));
      }
      for (const Layout& l : layouts) {
        ASSERT_EQ(l.batch * l.microbatches * l.dp, G);
        std::vector<int32_t> tokens(G * T, -1), targets(G * T, -1);
        for (int d = 0; d < l.dp; ++d)
          for (int j = 0; j < l.microbatches; ++j) {
            std::vector<int32_t> mb_tokens(l.batch * T), mb_targets(l.batch * T);
            read_microbatch(ds, step, d, l.dp, j, l.microbatches, l.batch, mb_tokens.data(),
                            mb_targets.data());
            const size_t row0 = size_t(d * l.microbatches + j) * l.batch;
            std::copy(mb_tokens.begin(), mb_tokens.end(), tokens.begin() + row0 * T);
            std::copy(mb_targets.begin(), mb_targets.end(), targets.begin() + row0 * T);
          }
        EXPECT_EQ(tokens, ref_tokens) << "step " << step << " B " << l.batch << " m " << l.microbatches
                                      << " dp " << l.dp << " shuffle " << shuffle;
        EXPECT_EQ(targets, ref_targets);
      }
    }
  }
}

TEST(TokenDataset, TheProfileSampleIsTheFirstMicrobatchOrNothing) {
  // What pptrain profile times the layers on: the first microbatch of the training data
  // (step 0, replica 0, microbatch 0), so ids repeat as in training; nothing without data
  // (no glob, or one matching no file); a bad shard is refused as for training.
  TempDir dir;
  write_token_shard(dir.file("t_0.bin"), iota_tokens(97, 3));
  const int T = 7, B = 3;
  for (bool shuffle : {false, true}) {
    const TokenDataset ds(dir.file("t_*.bin"), T, 65536, "data.train", shuffle, 5);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    read_microbatch(ds, 0, 0, 1, 0, 1, B, tokens.data(), targets.data());
    const TokenSample s = profile_sample(dir.file("t_*.bin"), T, 65536, B, shuffle, 5);
    EXPECT_EQ(s.tokens, tokens) << "shuffle " << shuffle;
    EXPECT_EQ(s.targets, targets) << "shuffle " << shuffle;
  }
  EXPECT_TRUE(profile_sample("", T, 65536, B, false, 5).tokens.empty());
  EXPECT_TRUE(profile_sample(dir.file("none_*.bin"), T, 65536, B, false, 5).tokens.empty());
  pptrain::testing::write_file(dir.file("bad_0.bin"), "not a shard");
  EXPECT_THROW(profile_sample(dir.file("bad_*.bin"), T, 65536, B, false, 5), Error);
}
