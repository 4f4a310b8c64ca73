// End-to-end training through the pptrain executable: learning down to a known entropy,
// bit-for-bit determinism, and bad inputs that must fail with one clear line.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

std::string markov_corpus(const TempDir& dir, int order, int vocab, int tokens, double* entropy) {
  std::string out = dir.file("markov");
  auto r = prepare_markov_corpus(out, vocab, tokens, 3, order);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  *entropy = std::stod(read_file(out + "/entropy.txt"));
  return out;
}

}  // namespace

namespace {

// Trains `model` (a YAML mapping) for 300 steps on an order-1 Markov source of 16 tokens and
// expects the validation loss within 5% of the source's entropy (the best any model can do).
void expect_learns_markov_entropy(const std::string& model) {
  TempDir dir;
  double entropy = 0;
  std::string data = markov_corpus(dir, 1, 16, 400000, &entropy);
  ASSERT_GT(entropy, 0.3);
  ASSERT_LT(entropy, std::log(16.0) * 0.7);
  write_file(dir.file("m.yaml"),
             "model: " + model + "\n"
             "parallel: {microbatches: 1}\n"
             "training: {steps: 300, micro_batch_size: 16, lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 20,"
             " eval_every: 300, eval_batches: 8, weight_decay: 0.0}\n"
             "data: {train: '" + data + "/train_*.bin', val: '" + data + "/val_*.bin'}\n"
             "logging: {every: 50, metrics: '" + dir.file("metrics.jsonl") + "'}\n");
  auto r = run_command("OMP_NUM_THREADS=2 " + pptrain_bin() + " train " + dir.file("m.yaml"), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto val = json_values(read_file(dir.file("metrics.jsonl")), "val_loss");
  ASSERT_FALSE(val.empty()) << r.output;
  EXPECT_LT(val.back(), 1.05 * entropy) << "entropy " << entropy << "\n" << r.output;
  EXPECT_GT(val.back(), 0.97 * entropy) << "below the entropy: the validation data leaks?";
}

}  // namespace

TEST(Train, LearnsMarkovSourceDownToItsEntropy) {
  expect_learns_markov_entropy("{n_layer: 2, n_head: 2, d_model: 32, seq_len: 32, vocab_size: 16}");
}

TEST(Train, LlamaLearnsMarkovSourceDownToItsEntropy) {
  // Grouped-query attention (2 key/value heads for 4 query heads), SwiGLU, untied head.
  expect_learns_markov_entropy("{arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, ffn_hidden: 96,"
                               " seq_len: 32, vocab_size: 16}");
}

TEST(Train, SameSeedSameLossesBitForBit) {
  TempDir dir;
  double entropy = 0;
  std::string data = markov_corpus(dir, 1, 16, 20000, &entropy);
  write_file(dir.file("m.yaml"),
             "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 16, vocab_size: 16}\n"
             "parallel: {microbatches: 2}\n"
             "training: {steps: 5, micro_batch_size: 4, eval_every: 0}\n"
             "data: {train: '" + data + "/train_*.bin', shuffle: true}\n"
             "logging: {every: 1}\n");
  std::string cmd = "OMP_NUM_THREADS=2 " + pptrain_bin() + " train " + dir.file("m.yaml") + " logging.metrics=";
  auto a = run_command(cmd + dir.file("a.jsonl"));
  auto b = run_command(cmd + dir.file("b.jsonl"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto la = json_values(read_file(dir.file("a.jsonl")), "loss"), lb = json_values(read_file(dir.file("b.jsonl")), "loss");
  ASSERT_EQ(la.size(), 5u);
  EXPECT_EQ(la, lb);
  auto c = run_command(cmd + dir.file("c.jsonl") + " training.seed=7");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(json_values(read_file(dir.file("c.jsonl")), "loss"), la);
}

// logging.sample_every: a byte-level run prints a sample every N steps (the last step's is
// the usual one at the end) and trains exactly as without: sampling touches nothing the
// training uses.
TEST(Train, SamplesAlongTheWayLeaveTheLossesAsTheyWere) {
  TempDir dir;
  double entropy = 0;
  std::string data = markov_corpus(dir, 1, 256, 20000, &entropy);
  write_file(dir.file("m.yaml"),
             "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 16, vocab_size: 256}\n"
             "training: {steps: 4, micro_batch_size: 4, eval_every: 0}\n"
             "data: {train: '" + data + "/train_*.bin'}\n"
             "logging: {every: 1, sample_tokens: 40}\n");
  std::string cmd = "OMP_NUM_THREADS=2 " + pptrain_bin() + " train " + dir.file("m.yaml") + " logging.metrics=";
  auto plain = run_command(cmd + dir.file("a.jsonl"));
  auto sampled = run_command(cmd + dir.file("b.jsonl") + " logging.sample_every=2");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(plain.output.find("sample at step"), std::string::npos) << plain.output;
  EXPECT_NE(sampled.output.find("sample at step 2:\n"), std::string::npos) << sampled.output;
  EXPECT_EQ(sampled.output.find("sample at step 4"), std::string::npos) << sampled.output;
  EXPECT_NE(sampled.output.find("sample:\n"), std::string::npos) << sampled.output;
  const auto a = json_values(read_file(dir.file("a.jsonl")), "loss");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, json_values(read_file(dir.file("b.jsonl")), "loss"));
}

// ---- bad input: one line naming the file/key, non-zero exit -------------------------

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    double entropy;
    data_ = markov_corpus(dir_, 1, 16, 5000, &entropy);
  }
  std::string config(const std::string& extra_model = "", const std::string& data_line = "") {
    std::string path = dir_.file("c.yaml");
    write_file(path, "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16" + extra_model + "}\n"
                     "parallel: {microbatches: 1}\n"
                     "training: {steps: 1, micro_batch_size: 2, eval_every: 0}\n" +
                     (data_line.empty() ? "data: {train: '" + data_ + "/train_*.bin'}\n" : data_line));
    return path;
  }
  void expect_failure(const std::string& args, const std::string& message) {
    auto r = run_command(pptrain_bin() + " train " + args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << "expected '" << message << "' in:\n" << r.output;
    EXPECT_EQ(r.output.find("Segmentation"), std::string::npos) << r.output;
  }
  TempDir dir_;
  std::string data_;
};

TEST_F(BadInput, UnknownConfigKey) {
  expect_failure(config() + " training.learning_rate=1", "unknown key 'training.learning_rate'");
}
TEST_F(BadInput, WrongType) {
  expect_failure(config() + " training.steps=ten", "key 'training.steps': expected an integer, got 'ten'");
}
TEST_F(BadInput, HeadsNotDividingWidth) {
  expect_failure(config() + " model.n_head=3", "n_head 3 must divide d_model 16");
}
TEST_F(BadInput, MissingConfigFile) {
  expect_failure(dir_.file("nope.yaml"), "nope.yaml: cannot open config file");
}
TEST_F(BadInput, MissingDataFile) {
  expect_failure(config("", "data: {train: '" + dir_.file("none") + "/train_*.bin'}\n"), "data.train: no file matches");
}
TEST_F(BadInput, ShardWithWrongMagic) {
  std::string bad = dir_.file("bad_000.bin");
  std::string bytes(1024 + 20, '\0');
  bytes[0] = 1;  // magic 1
  write_file(bad, bytes);
  expect_failure(config("", "data: {train: '" + bad + "'}\n"), "not a token shard");
}
TEST_F(BadInput, TruncatedShard) {
  std::string shard = read_file(data_ + "/train_000.bin");
  std::string cut = dir_.file("cut_000.bin");
  write_file(cut, shard.substr(0, shard.size() - 10));
  expect_failure(config("", "data: {train: '" + cut + "'}\n"), "truncated");
}
TEST_F(BadInput, TokenIdBeyondVocabulary) {
  // the corpus has 16 symbols; a model with vocab 8 cannot read it
  expect_failure(config() + " model.vocab_size=8", ">= model.vocab_size 8");
}
