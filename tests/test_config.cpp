// Config parsing, overrides and validation: every rejected input names file and key.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/error.h"

using namespace pptrain;

namespace {
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "exp.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, DefaultsMatchDesign) {
  Config c = parse_config("", "empty.yaml");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.parallel.schedule, "1f1b");
  EXPECT_EQ(c.parallel.microbatches, 8);
  EXPECT_TRUE(c.parallel.layers_per_stage.empty());
  EXPECT_DOUBLE_EQ(c.training.lr, 6.0e-4);
  EXPECT_EQ(c.training.seed, 1337u);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.logging.every, 10);
}

TEST(Config, ParsesSectionsAndOverrides) {
  Config c = parse_config(
      "model: {n_layer: 4, n_head: 2, d_model: 64, seq_len: 32, vocab_size: 256}\n"
      "parallel: {pp: 2, layers_per_stage: [1, 3]}\n"
      "training: {lr: 1.0e-3}\n",
      "exp.yaml", {"training.lr=3e-4", "parallel.schedule=zbv", "parallel.stages_per_rank=1"});
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.layers_per_stage, (std::vector<int>{1, 3}));
  EXPECT_DOUBLE_EQ(c.training.lr, 3e-4);
  EXPECT_EQ(c.parallel.schedule, "zbv");
}

TEST(Config, YamlRoundTrip) {
  Config a = parse_config("model: {n_layer: 3, d_model: 48, n_head: 3}\nparallel: {layers_per_stage: [3]}\n"
                          "training: {lr: 0.000123456789, seed: 99}\ndata: {train: 'x/*.bin'}\n",
                          "a.yaml");
  Config b = parse_config(to_yaml(a), "b.yaml");
  EXPECT_EQ(to_yaml(a), to_yaml(b));
  EXPECT_DOUBLE_EQ(b.training.lr, 0.000123456789);
  EXPECT_EQ(b.parallel.layers_per_stage, (std::vector<int>{3}));
  EXPECT_EQ(b.data.train, "x/*.bin");
}

TEST(Config, RejectsUnknownKeyNamingFileAndKey) {
  auto msg = error_of("training: {learning_rate: 1}\n");
  EXPECT_NE(msg.find("exp.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'training.learning_rate'"), std::string::npos) << msg;
  msg = error_of("trainig: {lr: 1}\n");
  EXPECT_NE(msg.find("unknown section 'trainig'"), std::string::npos) << msg;
}

TEST(Config, RejectsWrongType) {
  auto msg = error_of("training: {steps: many}\n");
  EXPECT_NE(msg.find("exp.yaml: key 'training.steps': expected an integer, got 'many'"), std::string::npos) << msg;
  msg = error_of("model: {n_layer: [1, 2]}\n");
  EXPECT_NE(msg.find("'model.n_layer': expected an integer, got a list"), std::string::npos) << msg;
  msg = error_of("", {"training.lr=fast"});
  EXPECT_NE(msg.find("training.lr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected a number"), std::string::npos) << msg;
}

TEST(Config, RejectsImpossibleValues) {
  auto msg = error_of("model: {n_head: 5, d_model: 64}\n");
  EXPECT_NE(msg.find("n_head 5 must divide d_model 64"), std::string::npos) << msg;
  msg = error_of("model: {n_layer: 2}\nparallel: {pp: 4}\n");
  EXPECT_NE(msg.find("fewer than the 4 pipeline stages"), std::string::npos) << msg;
  msg = error_of("model: {n_layer: 4}\nparallel: {pp: 2, layers_per_stage: [1, 2]}\n");
  EXPECT_NE(msg.find("sum to 3 but model.n_layer is 4"), std::string::npos) << msg;
  msg = error_of("model: {n_head: 12}\nparallel: {tp: 5}\n");
  EXPECT_NE(msg.find("tp 5 must divide model.n_head 12"), std::string::npos) << msg;
  msg = error_of("training: {precision: bf16}\n");
  EXPECT_NE(msg.find("bf16 needs device: cuda"), std::string::npos) << msg;
  EXPECT_EQ(parse_config("device: cuda\ntraining: {precision: bf16}\n", "t.yaml").precision(), Precision::bf16);
  msg = error_of("device: tpu\n");
  EXPECT_NE(msg.find("expected cpu or cuda"), std::string::npos) << msg;
}

TEST(Config, AttentionDefaultsToTheDevicesAndAcceptsEachChoice) {
  // Unset: flash on cuda; naive on cpu (its figures and losses as before the key existed).
  EXPECT_EQ(parse_config("", "t.yaml").model.attention, "naive");
  EXPECT_EQ(parse_config("device: cuda\n", "t.yaml").model.attention, "flash");
  EXPECT_EQ(parse_config("model: {attention: flash}\n", "t.yaml").model.attention, "flash");
  EXPECT_EQ(parse_config("device: cuda\nmodel: {attention: naive}\n", "t.yaml").model.attention, "naive");
  EXPECT_EQ(parse_config("device: cuda\ntraining: {precision: bf16}\n", "t.yaml", {"model.attention=cudnn"})
                .model.attention,
            "cudnn");
  // Unset on cuda with a head size the flash kernels do not take (d_model 16 / 2 heads = 8): naive.
  EXPECT_EQ(parse_config("device: cuda\nmodel: {n_head: 2, d_model: 16}\n", "t.yaml").model.attention, "naive");
  // The resolved choice survives the round trip through the written config.
  Config c = parse_config("device: cuda\n", "t.yaml");
  EXPECT_EQ(parse_config(to_yaml(c), "b.yaml").model.attention, "flash");
}

TEST(Config, RejectsAnUnknownAttentionAndCudnnOnTheCpu) {
  auto msg = error_of("model: {attention: fused}\n");
  EXPECT_EQ(msg, "exp.yaml: key 'model.attention': expected flash, cudnn or naive, got 'fused'");
  msg = error_of("", {"model.attention=cudnn"});
  EXPECT_EQ(msg, "exp.yaml: key 'model.attention': cudnn needs device: cuda (on the cpu expected naive or flash)");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  msg = error_of("device: cuda\nmodel: {n_head: 2, d_model: 16, attention: flash}\n");
  EXPECT_EQ(msg, "exp.yaml: key 'model.attention': flash on cuda needs a head size d_model/n_head of 32, 64 or 128 "
                 "(its kernels' tiles), got 8; naive takes any");
  // On the cpu flash takes any head size.
  EXPECT_EQ(parse_config("model: {n_head: 2, d_model: 16, attention: flash}\n", "t.yaml").model.attention, "flash");
}

TEST(Config, RejectsMalformedYamlAndOverride) {
  auto msg = error_of("model: {n_layer: 4\n");
  EXPECT_NE(msg.find("exp.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid YAML"), std::string::npos) << msg;
  msg = error_of("", {"training.lr"});
  EXPECT_NE(msg.find("expected section.key=value"), std::string::npos) << msg;
}

TEST(Config, CudnnAttentionNeedsBf16AndAHeadSizeCudnnTakes) {
  // d_model 64 / n_head 2 = head size 32: a multiple of 8, at most 128.
  const std::string ok = "device: cuda\nmodel: {n_head: 2, d_model: 64, attention: cudnn}\n";
  EXPECT_EQ(error_of(ok, {"training.precision=bf16"}), "");
  EXPECT_EQ(error_of(ok), "exp.yaml: key 'model.attention': cudnn needs training.precision: bf16 "
                          "(cuDNN's fused attention has no fp32 path)");
  // Head sizes 12 (not a multiple of 8) and 136 (above 128).
  for (const char* d_model : {"24", "272"})
    EXPECT_EQ(error_of(ok, {"training.precision=bf16", std::string("model.d_model=") + d_model}),
              std::string("exp.yaml: key 'model.attention': cudnn needs a head size d_model/n_head that is a "
                          "multiple of 8 and at most 128, got ") +
                  (d_model == std::string("24") ? "12" : "136"));
  // 128 itself is taken.
  EXPECT_EQ(error_of(ok, {"training.precision=bf16", "model.d_model=256"}), "");
}
