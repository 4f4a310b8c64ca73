// Config files and overrides from outside: malformed YAML, duplicate keys, non-finite and
// out-of-range numbers, missing files, directories and FIFOs given as configs, YAML alias bombs
// and second documents. Each is refused at once with one line naming the file (or override)
// and the key.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "core/config.h"
#include "core/error.h"
#include "support/config_error.h"
#include "support/test_util.h"

using namespace pptrain;
using pptrain::testing::config_error;

TEST(Config, RejectsMalformedYamlAndOverride) {
  auto msg = config_error("model: {n_layer: 4\n");
  EXPECT_NE(msg.find("exp.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid YAML"), std::string::npos) << msg;
  msg = config_error("", {"training.lr"});
  EXPECT_NE(msg.find("expected section.key=value"), std::string::npos) << msg;
}

TEST(Config, RejectsDuplicateKeysNamingTheKeyAndBothLines) {
  EXPECT_EQ(config_error("training:\n  lr: 1.0e-3\n  steps: 5\n  lr: 2.0e-3\n"),
            "exp.yaml: key 'training.lr' is given twice (lines 2 and 4; expected once)");
  EXPECT_EQ(config_error("model: {n_layer: 2}\ntraining: {steps: 1}\nmodel: {n_head: 2}\n"),
            "exp.yaml: key 'model' is given twice (lines 1 and 3; expected once)");
  EXPECT_EQ(config_error("", {"training={lr: 1.0e-3, lr: 2.0e-3}"}),
            "command line override 'training={lr: 1.0e-3, lr: 2.0e-3}': key 'training.lr' is given twice "
            "(lines 1 and 1; expected once)");
  // The same key in two sections, or given again as an override, is no duplicate.
  EXPECT_EQ(config_error("checkpoint: {every: 2}\nlogging: {every: 3}\n", {"logging.every=4"}), "");
}

// Every float key must be finite: YAML's .inf / .nan are refused where they are read,
// naming the file or the override and the key.
TEST(Config, RejectsNonFiniteFloatsNamingFileOrOverrideAndKey) {
  for (const char* key : {"lr", "min_lr", "weight_decay", "grad_clip", "beta1", "beta2", "eps"}) {
    for (const char* value : {".inf", "-.inf", ".nan"}) {
      const std::string in_file = std::string("training: {") + key + ": " + value + "}\n";
      EXPECT_EQ(config_error(in_file),
                std::string("exp.yaml: key 'training.") + key + "': expected a finite number, got '" + value + "'");
      const std::string override = std::string("training.") + key + "=" + value;
      EXPECT_EQ(config_error("", {override}), "command line override '" + override + "': key 'training." + key +
                                              "': expected a finite number, got '" + value + "'");
    }
  }
  // 1e999 is not a double at all; 1e308 is finite and caught by the range below.
  EXPECT_EQ(config_error("", {"training.lr=1e999"}),
            "command line override 'training.lr=1e999': key 'training.lr': expected a number, got '1e999'");
}

// Each float key has a stated range (config.h); each message names the key and the range.
TEST(Config, RejectsFloatsOutsideTheirStatedRanges) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"training.lr=1e308", "exp.yaml: key 'training.lr': expected 0 < lr <= 10, got 1e+308"},
      {"training.lr=0", "exp.yaml: key 'training.lr': expected 0 < lr <= 10, got 0"},
      {"training.min_lr=1.0e-3", "exp.yaml: key 'training.min_lr': expected 0 <= min_lr <= lr (0.0006), got 0.001"},
      {"training.min_lr=-1.0e-9", "exp.yaml: key 'training.min_lr': expected 0 <= min_lr <= lr (0.0006), got -1e-09"},
      {"training.weight_decay=11", "exp.yaml: key 'training.weight_decay': expected 0 <= weight_decay <= 10, got 11"},
      {"training.grad_clip=-1", "exp.yaml: key 'training.grad_clip': expected 0 <= grad_clip <= 1e+06 (0 disables "
                                "clipping), got -1"},
      {"training.beta1=1", "exp.yaml: key 'training.beta1': expected 0 <= beta1 < 1, got 1"},
      {"training.beta2=-0.5", "exp.yaml: key 'training.beta2': expected 0 <= beta2 < 1, got -0.5"},
      {"training.eps=0", "exp.yaml: key 'training.eps': expected 0 < eps <= 0.01, got 0"},
      {"training.eps=0.1", "exp.yaml: key 'training.eps': expected 0 < eps <= 0.01, got 0.1"},
  };
  for (const auto& [override, message] : cases) EXPECT_EQ(config_error("", {override}), message) << override;
  // The bounds themselves are in range.
  EXPECT_EQ(config_error("training: {lr: 10, min_lr: 10, weight_decay: 10, grad_clip: 1.0e6, eps: 1.0e-2}\n"), "");
}

// Integer keys have ranges too, and the buffers their products size must fit 64 bits.
TEST(Config, RejectsIntegersOutsideTheirRangesAndOverflowingSizes) {
  EXPECT_EQ(config_error("", {"model.n_layer=0"}), "exp.yaml: key 'model.n_layer': expected an integer in [1, 16384], got 0");
  EXPECT_EQ(config_error("", {"model.seq_len=2097152"}),
            "exp.yaml: key 'model.seq_len': expected an integer in [1, 1048576], got 2097152");
  EXPECT_EQ(config_error("", {"parallel.microbatches=-3"}),
            "exp.yaml: key 'parallel.microbatches': expected an integer in [1, 1048576], got -3");
  EXPECT_EQ(config_error("", {"parallel.profile_repeats=0"}),
            "exp.yaml: key 'parallel.profile_repeats': expected an integer in [1, 100000], got 0");
  EXPECT_EQ(config_error("", {"training.eval_batches=2000000"}),
            "exp.yaml: key 'training.eval_batches': expected an integer in [0, 1048576], got 2000000");
  EXPECT_EQ(config_error("", {"training.steps=4294967296"}),
            "command line override 'training.steps=4294967296': key 'training.steps': expected an integer, got "
            "'4294967296'");
  // pp·tp·dp: each factor in range, the product not.
  EXPECT_EQ(config_error("model: {n_head: 1024, d_model: 1024, n_layer: 1024}\n",
                     {"parallel.pp=1024", "parallel.tp=1024", "parallel.dp=2"}),
            "exp.yaml: key 'parallel.dp': pp x tp x dp = 2097152 ranks, more than 1048576");
  // 2^20 sequences of 2^20 tokens over a 2^24 vocabulary: 2^64 logits (x 4 bytes).
  EXPECT_EQ(config_error("", {"training.micro_batch_size=1048576", "model.seq_len=1048576",
                          "model.vocab_size=16777216"}),
            "exp.yaml: key 'training.micro_batch_size': micro_batch_size x seq_len x vocab_size (logits) overflows "
            "64-bit sizes (expected a smaller model or batch)");
  EXPECT_EQ(config_error("", {"training.micro_batch_size=1048576", "parallel.microbatches=4096"}),
            "exp.yaml: key 'training.micro_batch_size': micro_batch_size x microbatches x dp = 4294967296 "
            "sequences per step, more than 2147483647");
}

// load_config takes regular files only: a directory is not an empty config.
TEST(Config, LoadRefusesDirectoriesAndMissingFiles) {
  char dir_template[] = "/tmp/pptrain-config-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  try {
    load_config(dir);
    ADD_FAILURE() << "a directory loaded as a config";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "config " + dir + ": is a directory (expected a regular file)");
  }
  try {
    load_config(dir + "/none.yaml");
    ADD_FAILURE() << "a missing file loaded as a config";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/none.yaml: cannot open config file (No such file or directory)");
  }
  rmdir(dir.c_str());
}

// A FIFO or a directory given as the config (or a FIFO as a token shard) ends the run at
// once with one line naming it; `timeout` turns a hang into exit code 124.
TEST(Config, TrainRefusesFifosAndDirectoriesWithoutBlocking) {
  pptrain::testing::TempDir dir;
  const std::string fifo = dir.file("c.yaml");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto train = [&](const std::string& config) {
    return pptrain::testing::run_command("timeout 30 " + pptrain::testing::pptrain_bin() + " train " + config, 60);
  };
  auto r = train(fifo);
  EXPECT_TRUE(r.exit_code != 0 && r.exit_code != 124) << r.exit_code << r.output;
  EXPECT_NE(r.output.find("config " + fifo + ": is a FIFO (expected a regular file)"), std::string::npos) << r.output;

  r = train(dir.path());
  EXPECT_TRUE(r.exit_code != 0 && r.exit_code != 124) << r.exit_code << r.output;
  EXPECT_NE(r.output.find("config " + dir.path() + ": is a directory (expected a regular file)"), std::string::npos)
      << r.output;

  const std::string shard = dir.file("train_000.bin");
  ASSERT_EQ(mkfifo(shard.c_str(), 0600), 0);
  pptrain::testing::write_file(dir.file("ok.yaml"),
                               "model: {n_layer: 1, n_head: 1, d_model: 8, seq_len: 4, vocab_size: 16}\n"
                               "parallel: {microbatches: 1}\n"
                               "training: {steps: 1, micro_batch_size: 1, eval_every: 0}\n"
                               "data: {train: '" + dir.path() + "/train_*.bin'}\n");
  r = train(dir.file("ok.yaml"));
  EXPECT_TRUE(r.exit_code != 0 && r.exit_code != 124) << r.exit_code << r.output;
  EXPECT_NE(r.output.find("token shard " + shard + ": is a FIFO (expected a regular file)"), std::string::npos)
      << r.output;
}

// Found by fuzz_config (tests/fuzz/regressions/config/): a key that is not a name (a YAML
// sequence or mapping used as a key) was an uncaught yaml-cpp conversion error.
TEST(Config, RejectsKeysThatAreNotNames) {
  EXPECT_EQ(config_error("[~=r=]: 1\n"), "exp.yaml:1: expected a section name, got a list as a key");
  EXPECT_EQ(config_error("training:\n  {a: 1}: 2\n"), "exp.yaml:2: section 'training': expected a key name, got a mapping as a key");
}

// An alias bomb (9 levels of 9 aliases: 9^9 nodes in 400 bytes) is refused at once, in one
// line, before any walk over the tree; aliases in a normal config still work.
TEST(Config, AnAliasBombIsRefusedAtOnce) {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 9; ++level) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "lit" + string.
    const std::string name = std::to_string(level), prev = std::string("*a").append(std::to_string(level - 1));
    yaml.append("a").append(name).append(": &a").append(name).append(" [");
    for (int i = 0; i < 9; ++i) {
      if (i > 0) yaml += ", ";
      yaml += prev;
    }
    yaml += "]\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    parse_config(yaml, "bomb.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "bomb.yaml: the config expands to more than 100000 YAML nodes (aliases that repeat "
                           "aliases); a config has a few hundred");
  }
  // The bound walks at most 100000 nodes (milliseconds); the 7-level bomb's full walk took 7 s.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  const Config c = parse_config("model: {n_layer: &n 2, n_head: *n, d_model: 16}\n", "alias.yaml");
  EXPECT_EQ(c.model.n_head, 2);
}

// A second YAML document is refused, not dropped; `layers_per_stage: []` is not read as auto.
TEST(Config, ASecondDocumentAndAnEmptySplitAreRefused) {
  try {
    parse_config("model: {n_layer: 2}\n---\ntraining: {steps: 5}\n", "two.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "two.yaml:2: a second YAML document ('---' after the first); a config is one document");
  }
  EXPECT_EQ(parse_config("---\nmodel: {n_layer: 2}\n", "one.yaml").model.n_layer, 2);  // one, marked
  try {
    parse_config("parallel: {layers_per_stage: []}\n", "empty.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'parallel.layers_per_stage': expected 'auto' or a list of one block "
                                         "count per stage, got []"),
              std::string::npos)
        << e.what();
  }
}
