// Config parsing, overrides and validation: defaults, the model families' keys, the shipped
// configs; every rejected value names file and key. Malformed and hostile input (YAML, numbers
// out of range, FIFOs, alias bombs): test_config_input.cpp.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/error.h"
#include "job/memory_estimate.h"
#include "support/config_error.h"

using namespace pptrain;
using pptrain::testing::config_error;

TEST(Config, DefaultsMatchDesign) {
  Config c = parse_config("", "empty.yaml");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.parallel.schedule, "1f1b");
  EXPECT_EQ(c.parallel.microbatches, 8);
  EXPECT_TRUE(c.parallel.layers_per_stage.empty());
  EXPECT_EQ(c.parallel.profile_repeats, 10);
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
  auto msg = config_error("training: {learning_rate: 1}\n");
  EXPECT_NE(msg.find("exp.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'training.learning_rate'"), std::string::npos) << msg;
  msg = config_error("trainig: {lr: 1}\n");
  EXPECT_NE(msg.find("unknown section 'trainig'"), std::string::npos) << msg;
}

TEST(Config, MemoryPerRankIsGibInRangeAndAutoRecomputeNeedsItAndAProfile) {
  EXPECT_EQ(config_error("", {"parallel.memory_per_rank_gib=24"}), "");
  auto msg = config_error("", {"parallel.memory_per_rank_gib=-1"});
  EXPECT_NE(msg.find("key 'parallel.memory_per_rank_gib': expected GiB in [0, 1e6] (0: no limit), got -1"),
            std::string::npos)
      << msg;
  msg = config_error("parallel: {memory_per_rank_gib: .nan}\n");
  EXPECT_NE(msg.find("key 'parallel.memory_per_rank_gib': expected a finite number"), std::string::npos) << msg;
  for (const auto& missing : std::vector<std::vector<std::string>>{
           {"training.recompute=auto"},
           {"training.recompute=auto", "parallel.profile=measure"},
           {"training.recompute=auto", "parallel.memory_per_rank_gib=8"}}) {
    msg = config_error("", missing);
    EXPECT_NE(msg.find("key 'training.recompute': auto needs parallel.profile"), std::string::npos) << msg;
  }
  EXPECT_EQ(config_error("", {"training.recompute=auto", "parallel.profile=measure", "parallel.memory_per_rank_gib=8"}),
            "");
}

TEST(Config, RejectsWrongType) {
  auto msg = config_error("training: {steps: many}\n");
  EXPECT_NE(msg.find("exp.yaml: key 'training.steps': expected an integer, got 'many'"), std::string::npos) << msg;
  msg = config_error("model: {n_layer: [1, 2]}\n");
  EXPECT_NE(msg.find("'model.n_layer': expected an integer, got a list"), std::string::npos) << msg;
  msg = config_error("", {"training.lr=fast"});
  EXPECT_NE(msg.find("training.lr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected a number"), std::string::npos) << msg;
}

TEST(Config, RejectsImpossibleValues) {
  auto msg = config_error("model: {n_head: 5, d_model: 64}\n");
  EXPECT_NE(msg.find("n_head 5 must divide d_model 64"), std::string::npos) << msg;
  msg = config_error("model: {n_layer: 2}\nparallel: {pp: 4}\n");
  EXPECT_NE(msg.find("fewer than the 4 pipeline stages"), std::string::npos) << msg;
  msg = config_error("model: {n_layer: 4}\nparallel: {pp: 2, layers_per_stage: [1, 2]}\n");
  EXPECT_NE(msg.find("sum to 3 but model.n_layer is 4"), std::string::npos) << msg;
  msg = config_error("model: {n_head: 12}\nparallel: {tp: 5}\n");
  EXPECT_NE(msg.find("tp 5 must divide model.n_head 12"), std::string::npos) << msg;
  msg = config_error("training: {precision: bf16}\n");
  EXPECT_NE(msg.find("bf16 needs device: cuda"), std::string::npos) << msg;
  EXPECT_EQ(parse_config("device: cuda\ntraining: {precision: bf16}\n", "t.yaml").precision(), Precision::bf16);
  msg = config_error("device: tpu\n");
  EXPECT_NE(msg.find("expected cpu or cuda"), std::string::npos) << msg;
}

TEST(Config, LlamaKeysResolveToTheirStatedDefaults) {
  const Config gpt2 = parse_config("model: {n_head: 4, d_model: 64}\n", "g.yaml");
  EXPECT_TRUE(gpt2.model.tie_embeddings);
  EXPECT_EQ(gpt2.model.n_kv_head, 4);
  EXPECT_EQ(gpt2.model.ffn_hidden, 256);  // 4C
  const Config llama = parse_config("model: {arch: llama, n_head: 4, d_model: 768}\n", "l.yaml");
  EXPECT_FALSE(llama.model.tie_embeddings);
  EXPECT_EQ(llama.model.n_kv_head, 4);
  EXPECT_EQ(llama.model.ffn_hidden, 2048);  // 8·768/3 = 2048, a multiple of 256
  EXPECT_EQ(llama_ffn_hidden(4096), 11008);  // Llama 2 7B
  EXPECT_DOUBLE_EQ(llama.model.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(llama.model.norm_eps, 1e-6);
  // Given explicitly, in the file or as an override, tie_embeddings is kept.
  EXPECT_TRUE(parse_config("model: {arch: llama, tie_embeddings: true}\n", "l.yaml").model.tie_embeddings);
  EXPECT_TRUE(parse_config("model: {arch: llama}\n", "l.yaml", {"model.tie_embeddings=true"}).model.tie_embeddings);
  EXPECT_FALSE(parse_config("", "g.yaml", {"model.tie_embeddings=false"}).model.tie_embeddings);
  // The resolved config parses back to itself (checkpoints store it).
  EXPECT_EQ(to_yaml(parse_config(to_yaml(llama), "again.yaml")), to_yaml(llama));
}

TEST(Config, RejectsImpossibleLlamaShapesWithOneLine) {
  const std::string llama = "model: {arch: llama, n_head: 4, d_model: 64, n_kv_head: 2}\n";
  auto msg = config_error(llama + "parallel: {tp: 4}\n");
  EXPECT_NE(msg.find("key 'parallel.tp': tp 4 must divide model.n_kv_head 2"), std::string::npos) << msg;
  msg = config_error("model: {arch: llama, n_head: 4, d_model: 64, n_kv_head: 3}\n");
  EXPECT_NE(msg.find("key 'model.n_kv_head': n_kv_head 3 must divide n_head 4"), std::string::npos) << msg;
  msg = config_error("model: {arch: llama, n_head: 4, d_model: 64, n_kv_head: 8}\n");
  EXPECT_NE(msg.find("key 'model.n_kv_head': expected an integer in [1, 4], got 8"), std::string::npos) << msg;
  msg = config_error("model: {arch: llama, n_head: 4, d_model: 12}\n");
  EXPECT_NE(msg.find("key 'model.n_head': the head size 3 must be even"), std::string::npos) << msg;
  msg = config_error(llama, {"model.head_dim=7"});
  EXPECT_NE(msg.find("key 'model.head_dim': the head size 7 must be even"), std::string::npos) << msg;
  msg = config_error(llama, {"model.rope_scaling=yarn"});
  EXPECT_NE(msg.find("key 'model.rope_scaling': expected none, linear or llama3, got 'yarn'"), std::string::npos) << msg;
  msg = config_error(llama, {"model.rope_scaling=llama3", "model.rope_factor=8", "model.rope_low_freq_factor=4"});
  EXPECT_NE(msg.find("key 'model.rope_high_freq_factor': expected 0 < rope_low_freq_factor < rope_high_freq_factor"),
            std::string::npos) << msg;
  msg = config_error(llama, {"model.rope_factor=8"});
  EXPECT_NE(msg.find("key 'model.rope_factor': applies with rope_scaling linear or llama3 only"), std::string::npos)
      << msg;
  msg = config_error("model: {n_head: 4, d_model: 64, head_dim: 32}\n");
  EXPECT_NE(msg.find("key 'model.head_dim': applies to the Llama family only"), std::string::npos) << msg;
  msg = config_error("model: {n_head: 4, d_model: 64, rope_scaling: linear, rope_factor: 2}\n");
  EXPECT_NE(msg.find("key 'model.rope_scaling': applies to the Llama family only"), std::string::npos) << msg;
  // Another head width than d_model/n_head (Mistral's, Qwen's), and the family's other archs.
  for (const char* arch : {"llama", "mistral", "qwen2"}) {
    const Config c = parse_config(cat("model: {arch: ", arch, ", n_head: 4, d_model: 64, n_kv_head: 2, head_dim: 32}\n"),
                                  "h.yaml");
    EXPECT_EQ(c.model.attention_head_dim(), 32);
    EXPECT_EQ(c.model.qkv_bias(), std::string(arch) == "qwen2");
  }
  msg = config_error(llama, {"model.ffn_hidden=31", "parallel.tp=2"});
  EXPECT_NE(msg.find("tp 2 must divide model.ffn_hidden 31"), std::string::npos) << msg;
  msg = config_error(llama, {"model.rope_theta=0.5"});
  EXPECT_NE(msg.find("key 'model.rope_theta': expected 1 < rope_theta"), std::string::npos) << msg;
  msg = config_error(llama, {"model.norm_eps=0"});
  EXPECT_NE(msg.find("key 'model.norm_eps': expected 0 < norm_eps"), std::string::npos) << msg;
  // Llama runs on cuda with any of the three attention cores; cuDNN's takes grouped-query
  // attention (n_kv_head 2 < n_head 4 here) as it takes multi-head.
  EXPECT_EQ(parse_config("device: cuda\n" + llama, "l.yaml").model.attention, "naive");  // head size 16, fp32
  EXPECT_EQ(parse_config("device: cuda\n" + llama, "l.yaml", {"model.attention=cudnn", "training.precision=bf16"})
                .model.attention,
            "cudnn");
  msg = config_error("model: {arch: llama3}\n");
  EXPECT_NE(msg.find("expected gpt2, llama, mistral, qwen2 or qwen3, got 'llama3'"), std::string::npos) << msg;
  // gpt2 takes none of the Llama keys.
  msg = config_error("model: {n_kv_head: 2}\n");
  EXPECT_NE(msg.find("key 'model.n_kv_head': applies to arch: llama only"), std::string::npos) << msg;
  msg = config_error("model: {ffn_hidden: 100}\n");
  EXPECT_NE(msg.find("key 'model.ffn_hidden': applies to arch: llama only"), std::string::npos) << msg;
  msg = config_error("model: {rope_theta: 500000}\n");
  EXPECT_NE(msg.find("key 'model.rope_theta': applies to arch: llama only"), std::string::npos) << msg;
  for (const std::string& m : {config_error(llama + "parallel: {tp: 4}\n"), config_error("model: {ffn_hidden: 100}\n")})
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(Config, OnlyTheFirstAndLastStageMayHoldNoBlock) {
  // The first stage keeps the embedding and the last the head even with no block.
  for (const char* cut : {"[0, 4]", "[4, 0]"})
    EXPECT_EQ(config_error(std::string("model: {n_layer: 4}\nparallel: {pp: 2, layers_per_stage: ") + cut + "}\n"), "")
        << cut;
  const Config c = parse_config("model: {n_layer: 2}\nparallel: {pp: 2, stages_per_rank: 2, layers_per_stage: [0, 1, 1, 0]}\n",
                                "v.yaml");
  EXPECT_EQ(c.parallel.layers_per_stage, (std::vector<int>{0, 1, 1, 0}));
  auto msg = config_error("model: {n_layer: 4}\nparallel: {pp: 3, layers_per_stage: [2, 0, 2]}\n");
  EXPECT_NE(msg.find("exp.yaml: key 'parallel.layers_per_stage[1]': expected at least 1 block"), std::string::npos)
      << msg;
  msg = config_error("model: {n_layer: 4}\nparallel: {pp: 2, layers_per_stage: [-1, 5]}\n");
  EXPECT_NE(msg.find("'parallel.layers_per_stage[0]': expected 0 or more blocks, got -1"), std::string::npos) << msg;
  msg = config_error("model: {n_layer: 1}\nparallel: {pp: 2, layers_per_stage: [0, 0]}\n");
  EXPECT_NE(msg.find("sum to 0 but model.n_layer is 1"), std::string::npos) << msg;
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

// On cuda the unset core is the fastest the build and the model allow: cuDNN's fused
// attention where the binary has cuDNN and the model fits it, else the flash kernels,
// else naive; the reason goes to the start-up line, and a named core has none.
TEST(Config, AttentionDefaultOnCudaIsCudnnWhereTheBuildAndTheModelAllowIt) {
  const BuildFeatures cudnn{.cudnn = true}, none{};
  const std::string bf16 = "device: cuda\ntraining: {precision: bf16}\n";  // GPT-2 124M: head size 64
  Config c = parse_config(bf16, "t.yaml", {}, cudnn);
  EXPECT_EQ(c.model.attention, "cudnn");
  EXPECT_EQ(c.model.attention_default, "default on cuda: cuDNN's fused attention, bf16, head size 64");
  EXPECT_EQ(parse_config(to_yaml(c), "b.yaml").model.attention, "cudnn");  // written resolved
  EXPECT_EQ(parse_config(to_yaml(c), "b.yaml").model.attention_default, "");
  c = parse_config(bf16, "t.yaml", {}, none);
  EXPECT_EQ(c.model.attention, "flash");
  EXPECT_EQ(c.model.attention_default, "default on cuda: this binary has no cuDNN, so the flash kernels");
  c = parse_config("device: cuda\n", "t.yaml", {}, cudnn);  // fp32
  EXPECT_EQ(c.model.attention, "flash");
  EXPECT_EQ(c.model.attention_default, "default on cuda: cuDNN's fused attention needs bf16, so the flash kernels");
  c = parse_config(bf16, "t.yaml", {"model.arch=llama", "model.n_kv_head=4"}, cudnn);  // grouped-query
  EXPECT_EQ(c.model.attention, "cudnn");
  c = parse_config(bf16, "t.yaml", {"model.n_head=2", "model.d_model=16"}, cudnn);  // head size 8: cuDNN's
  EXPECT_EQ(c.model.attention, "cudnn");
  c = parse_config(bf16, "t.yaml", {"model.n_head=4", "model.d_model=1000"}, cudnn);  // head size 250
  EXPECT_EQ(c.model.attention, "naive");
  EXPECT_EQ(c.model.attention_default,
            "default on cuda: head size 250 is not cuDNN's (a multiple of 8 up to 128), and no flash kernel for head "
            "size 250");
  c = parse_config(bf16, "t.yaml", {"model.attention=flash"}, cudnn);
  EXPECT_EQ(c.model.attention, "flash");
  EXPECT_EQ(c.model.attention_default, "");
  EXPECT_EQ(parse_config("", "t.yaml", {}, cudnn).model.attention, "naive");  // cpu
}

TEST(Config, RejectsAnUnknownAttentionAndCudnnOnTheCpu) {
  auto msg = config_error("model: {attention: fused}\n");
  EXPECT_EQ(msg, "exp.yaml: key 'model.attention': expected flash, cudnn or naive, got 'fused'");
  msg = config_error("", {"model.attention=cudnn"});
  EXPECT_EQ(msg, "exp.yaml: key 'model.attention': cudnn needs device: cuda (on the cpu expected naive or flash)");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  msg = config_error("device: cuda\nmodel: {n_head: 2, d_model: 16, attention: flash}\n");
  EXPECT_EQ(msg, "exp.yaml: key 'model.attention': flash on cuda needs a head size of 32, 64 or 128 "
                 "(its kernels' tiles), got 8; naive takes any");
  // On the cpu flash takes any head size.
  EXPECT_EQ(parse_config("model: {n_head: 2, d_model: 16, attention: flash}\n", "t.yaml").model.attention, "flash");
}

TEST(Config, CudnnAttentionNeedsBf16AndAHeadSizeCudnnTakes) {
  // d_model 64 / n_head 2 = head size 32: a multiple of 8, at most 128.
  const std::string ok = "device: cuda\nmodel: {n_head: 2, d_model: 64, attention: cudnn}\n";
  EXPECT_EQ(config_error(ok, {"training.precision=bf16"}), "");
  EXPECT_EQ(config_error(ok), "exp.yaml: key 'model.attention': cudnn needs training.precision: bf16 "
                          "(cuDNN's fused attention has no fp32 path)");
  // Head sizes 12 (not a multiple of 8) and 136 (above 128).
  for (const char* d_model : {"24", "272"})
    EXPECT_EQ(config_error(ok, {"training.precision=bf16", std::string("model.d_model=") + d_model}),
              std::string("exp.yaml: key 'model.attention': cudnn needs a head size that is a "
                          "multiple of 8 and at most 128, got ") +
                  (d_model == std::string("24") ? "12" : "136"));
  // 128 itself is taken.
  EXPECT_EQ(config_error(ok, {"training.precision=bf16", "model.d_model=256"}), "");
}

// The shipped configs stay within the ranges.
TEST(Config, ShippedConfigsLoad) {
  for (const char* name : {"configs/demo.yaml", "configs/reference.yaml", "configs/gpt2_124m_gpu.yaml",
                           "configs/gpt2_1558m_t4096.yaml", "configs/llama_tiny.yaml", "configs/llama31_tiny.yaml",
                           "configs/mistral_tiny.yaml", "configs/qwen2_tiny.yaml", "configs/qwen3_tiny.yaml"})
    EXPECT_NO_THROW(load_config(name)) << name;
}

// The Llama-family configs for GPU clusters: the parameters of Llama 3 and 3.1 8B, Llama
// 3.2 1B and Qwen2.5 7B (as transformers counts them) and the number of ranks their comments
// lay out, checked with device cpu and fp32, and as written (cuda, bf16: config validation
// does not need a GPU).
TEST(Config, LlamaGpuConfigsHaveLlama3ShapesAndTheirLayouts) {
  struct Case {
    const char* file;
    int ranks;
    double parameters;
  };
  for (const Case& c : {Case{"configs/llama3_8b_gpu.yaml", 16, 8030261248.0},
                        Case{"configs/llama3_1_8b_gpu.yaml", 16, 8030261248.0},
                        Case{"configs/llama3_1b_gpu.yaml", 8, 1235814400.0},
                        Case{"configs/qwen2_5_7b_gpu.yaml", 16, 7615616512.0}}) {
    const Config cfg = load_config(c.file, {"device=cpu", "training.precision=fp32"});
    EXPECT_EQ(cfg.parallel.dp * cfg.parallel.pp * cfg.parallel.tp, c.ranks) << c.file;
    EXPECT_EQ(global_parameter_count(cfg.model), c.parameters) << c.file;
    EXPECT_EQ(cfg.model.seq_len, 8192) << c.file;
    EXPECT_NO_THROW(load_config(c.file)) << c.file;
  }
}
