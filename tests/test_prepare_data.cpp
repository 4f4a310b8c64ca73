// The synthetic corpus and `pptrain prepare-data`: the Markov source's entropy rate against
// closed forms and a plug-in estimate of a generated stream, determinism and bad tables;
// prepare-data's text and Markov modes (bytes as tokens, train/val split, shards, the
// entropy file) in process and through the executable, bad arguments one line each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/markov.h"
#include "data/token_dataset.h"
#include "data/token_shard.h"
#include "support/error_of.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::data;
using pptrain::testing::TempDir;
using pptrain::testing::error_of;

namespace {

class PrepareData : public ::testing::Test {
 protected:
  void SetUp() override { log::set_quiet(true); }
  void TearDown() override { log::set_quiet(false); }
};

}  // namespace

// ---- Markov source --------------------------------------------------------------

TEST(Markov, UniformTableHasEntropyExactlyLnV) {
  for (auto [order, vocab] : std::vector<std::pair<int, int>>{{0, 7}, {1, 5}, {2, 5}, {3, 4}}) {
    uint64_t contexts = uint64_t(std::pow(vocab, order) + 0.5);
    MarkovSource source(order, vocab, std::vector<double>(contexts * vocab, 1.0 / vocab));
    EXPECT_NEAR(source.entropy_rate(), std::log(double(vocab)), 1e-12);
    for (double p : source.stationary()) EXPECT_NEAR(p, 1.0 / double(contexts), 1e-12);
  }
}

TEST(Markov, TwoStateChainMatchesClosedForm) {
  // P = [[1-a, a], [b, 1-b]]: π = (b, a) / (a + b), H = π0 h(a) + π1 h(b) with h the
  // binary entropy.
  const double a = 0.1, b = 0.35;
  MarkovSource source(1, 2, {1 - a, a, b, 1 - b});
  auto h = [](double p) { return -p * std::log(p) - (1 - p) * std::log(1 - p); };
  EXPECT_NEAR(source.stationary()[0], b / (a + b), 1e-12);
  EXPECT_NEAR(source.entropy_rate(), (b * h(a) + a * h(b)) / (a + b), 1e-12);

  // A periodic chain (0 -> 1 -> 0 deterministically) still has a stationary π = (1/2, 1/2).
  MarkovSource periodic(1, 2, {0, 1, 1, 0});
  EXPECT_NEAR(periodic.stationary()[0], 0.5, 1e-12);
  EXPECT_NEAR(periodic.entropy_rate(), 0.0, 1e-15);
}

namespace {
// Plug-in estimate of H(X_t | previous `order` tokens) from counts, in nats.
double empirical_conditional_entropy(const std::vector<uint16_t>& s, int order, int vocab) {
  std::map<uint64_t, std::map<uint16_t, uint64_t>> counts;
  for (size_t t = size_t(order); t < s.size(); ++t) {
    uint64_t context = 0;
    for (int k = order; k >= 1; --k) context = context * uint64_t(vocab) + s[t - k];
    ++counts[context][s[t]];
  }
  const double n = double(s.size() - size_t(order));
  double h = 0;
  for (const auto& [context, next] : counts) {
    double total = 0;
    for (const auto& [x, c] : next) total += double(c);
    for (const auto& [x, c] : next) h -= double(c) / n * std::log(double(c) / total);
  }
  return h;
}
}  // namespace

TEST(Markov, GeneratedStreamHasTheComputedEntropyRate) {
  // Order 1: the plug-in estimate is biased low by about (cells - contexts) / 2n < 3e-4.
  MarkovSource first = MarkovSource::random(1, 32, 0.05, 1337);
  ASSERT_GT(first.entropy_rate(), 0.8);
  ASSERT_LT(first.entropy_rate(), 1.6);
  std::vector<uint16_t> stream = first.generate(2000000, 11);
  EXPECT_NEAR(empirical_conditional_entropy(stream, 1, 32), first.entropy_rate(), 0.01);

  // Order 2 (1024 contexts): the empirical cross-entropy -mean ln P(x_t | context) is
  // an unbiased estimate of H for a stationary stream.
  MarkovSource second = MarkovSource::random(2, 32, 0.05, 7);
  stream = second.generate(2000000, 3);
  double nll = 0;
  uint64_t context = 0;
  for (int k = 0; k < 2; ++k) context = second.next_context(context, stream[k]);
  for (size_t t = 2; t < stream.size(); ++t) {
    nll -= std::log(second.row(context)[stream[t]]);
    context = second.next_context(context, stream[t]);
  }
  EXPECT_NEAR(nll / double(stream.size() - 2), second.entropy_rate(), 0.01);
  EXPECT_NEAR(empirical_conditional_entropy(stream, 2, 32), second.entropy_rate(), 0.02);
}

TEST(Markov, IsDeterministicAndRejectsTooManyContexts) {
  MarkovSource a = MarkovSource::random(2, 16, 0.1, 5), b = MarkovSource::random(2, 16, 0.1, 5);
  MarkovSource c = MarkovSource::random(2, 16, 0.1, 6);
  EXPECT_EQ(a.entropy_rate(), b.entropy_rate());
  EXPECT_NE(a.entropy_rate(), c.entropy_rate());
  std::vector<uint16_t> longer = a.generate(5000, 9), shorter = b.generate(1000, 9);
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  EXPECT_NE(a.generate(1000, 10), shorter);
  for (uint16_t x : longer) EXPECT_LT(x, 16);

  // Peaked rows: lower concentration, lower entropy, all well below ln V.
  EXPECT_LT(MarkovSource::random(1, 32, 0.02, 1).entropy_rate(),
            MarkovSource::random(1, 32, 0.2, 1).entropy_rate());
  EXPECT_LT(MarkovSource::random(1, 32, 0.2, 1).entropy_rate(), std::log(32.0) - 0.5);

  EXPECT_EQ(error_of([] { MarkovSource::random(5, 16, 0.1, 1); }),
            "markov source: vocab^order = 16^5 contexts exceeds 1000000 (lower the order or the vocab)");
  EXPECT_EQ(error_of([] { MarkovSource::random(1, 32, 0.0, 1); }),
            "markov source: concentration must be in (0, 1e6] (got 0)");
  EXPECT_EQ(error_of([] { MarkovSource(1, 2, {0.5, 0.4, 0.5, 0.5}); }),
            "markov source: context 0 sums to 0.9, not 1");
}

// ---- prepare-data ---------------------------------------------------------------

namespace {
std::vector<uint16_t> read_all_shards(const std::string& glob) {
  std::vector<uint16_t> all;
  for (const std::string& file : match_shard_files(glob, "test")) {
    std::vector<uint16_t> part = read_token_shard(file);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}
}  // namespace

TEST_F(PrepareData, TextWritesTheBytesAsTokens) {
  TempDir dir;
  std::string first, second = "hello, shards\n";
  for (int i = 0; i < 1000; ++i) first += char(i * 37 % 256);  // every byte value
  pptrain::testing::write_file(dir.file("a.txt"), first);
  pptrain::testing::write_file(dir.file("b.txt"), second);
  const std::string out = dir.file("out");
  ASSERT_EQ(cmd_prepare_data({"--text", dir.file("a.txt"), dir.file("b.txt"), "--out", out,
                              "--val-fraction", "0.25", "--shard-tokens", "300"}),
            0);
  const std::string bytes = first + second;
  const size_t val = size_t(std::llround(bytes.size() * 0.25));
  const std::vector<uint16_t> train = read_all_shards(out + "/train_*.bin");
  const std::vector<uint16_t> val_tokens = read_all_shards(out + "/val_*.bin");
  ASSERT_EQ(train.size(), bytes.size() - val);
  ASSERT_EQ(val_tokens.size(), val);
  for (size_t i = 0; i < bytes.size(); ++i) {
    uint16_t token = i < train.size() ? train[i] : val_tokens[i - train.size()];
    ASSERT_EQ(token, uint16_t(static_cast<unsigned char>(bytes[i]))) << "byte " << i;
  }
  EXPECT_TRUE(std::filesystem::exists(out + "/train_002.bin"));
  EXPECT_FALSE(std::filesystem::exists(out + "/train_003.bin"));

  // The shards load as a byte-level dataset; a rerun with larger shards leaves no stale one.
  TokenDataset ds(out + "/train_*.bin", 16, 256, "data.train");
  EXPECT_EQ(ds.num_tokens(), train.size());
  ASSERT_EQ(cmd_prepare_data({"--text", dir.file("a.txt"), dir.file("b.txt"), "--out", out}), 0);
  EXPECT_FALSE(std::filesystem::exists(out + "/train_001.bin"));
  EXPECT_EQ(read_all_shards(out + "/train_*.bin").size() + read_all_shards(out + "/val_*.bin").size(),
            bytes.size());
}

TEST_F(PrepareData, RejectsBadArguments) {
  TempDir dir;
  const std::string missing = dir.file("missing.txt");
  EXPECT_EQ(error_of([&] { cmd_prepare_data({"--text", missing, "--out", dir.file("o")}); }),
            missing + ": cannot read (No such file or directory)");
  EXPECT_EQ(error_of([&] { cmd_prepare_data({"--markov", "--out", dir.file("o"), "--val-fraction", "1"}); }),
            "prepare-data --val-fraction: expected a value in (0, 1), got 1");
  EXPECT_EQ(error_of([&] { cmd_prepare_data({"--markov", "--out", dir.file("o"), "--vocab", "x"}); }),
            "prepare-data --vocab: expected an integer in [2, 65536], got 'x'");
  EXPECT_EQ(error_of([&] { cmd_prepare_data({"--markov", "--out", dir.file("o"), "--order", "6"}); }),
            "markov source: vocab^order = 32^6 contexts exceeds 1000000 (lower the order or the vocab)");
  EXPECT_NE(error_of([&] { cmd_prepare_data({"--out", dir.file("o")}); })
                .find("prepare-data: give exactly one of --text FILE... or --markov"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cmd_prepare_data({"--markov", "--out", dir.file("o"), "--bogus", "1"}); })
                .find("prepare-data: unknown option '--bogus'"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("o")));
}

TEST_F(PrepareData, MarkovWritesStreamAndEntropy) {
  TempDir dir;
  const std::string out = dir.file("markov");
  ASSERT_EQ(cmd_prepare_data({"--markov", "--order", "1", "--vocab", "16", "--tokens", "5000",
                              "--seed", "21", "--concentration", "0.1", "--out", out}),
            0);
  MarkovSource source = MarkovSource::random(1, 16, 0.1, 21);
  std::vector<uint16_t> stream = read_all_shards(out + "/train_*.bin");
  const std::vector<uint16_t> val = read_all_shards(out + "/val_*.bin");
  EXPECT_EQ(val.size(), 500u);
  stream.insert(stream.end(), val.begin(), val.end());
  EXPECT_EQ(stream, source.generate(5000, 21));
  const double written = std::stod(pptrain::testing::read_file(out + "/entropy.txt"));
  EXPECT_NEAR(written, source.entropy_rate(), 1e-6);
}

// The command through the pptrain binary: output line, exit codes, the one-line error.
TEST(PrepareDataCli, PrintsEntropyAndFailsCleanly) {
  const std::string bin = pptrain::testing::pptrain_bin();
  ASSERT_TRUE(std::filesystem::exists(bin)) << bin << " not built (set PPTRAIN_BIN)";
  TempDir dir;
  auto ok = pptrain::testing::run_command(
      bin + " prepare-data --markov --tokens 20000 --out " + dir.file("m"), 60);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const double expected = MarkovSource::random(2, 32, 0.05, 1337).entropy_rate();
  const size_t at = ok.output.find("entropy_nats_per_token: ");
  ASSERT_NE(at, std::string::npos) << ok.output;
  EXPECT_NEAR(std::stod(ok.output.substr(at + 24)), expected, 1e-6);
  EXPECT_GT(expected, 1.0);
  EXPECT_LT(expected, 1.5);

  auto bad = pptrain::testing::run_command(
      bin + " prepare-data --text " + dir.file("nope.txt") + " --out " + dir.file("t"), 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find(dir.file("nope.txt") + ": cannot read (No such file or directory)"),
            std::string::npos)
      << bad.output;
}
