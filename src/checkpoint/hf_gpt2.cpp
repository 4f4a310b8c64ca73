// GPT2LMHeadModel <-> pptrain's gpt2: the tensor table and config.json.
//
// GPT-2's linear layers are Conv1D, weights stored [in, out]: c_attn [C, 3C] (q | k | v
// along the output, heads contiguous within each, as pptrain's qkv [3C, C] along dim 0),
// c_proj [C, C], c_fc [C, 4C], mlp.c_proj [4C, C]; pptrain's are [out, in], so these are
// transposed. The LM head is tied to wte (lm_head.weight, when a file holds it, must
// equal it). Keys of config.json that change what the model computes are checked against
// what pptrain computes: LayerNorm eps 1e-5 (backend/ops.h), tanh GELU ("gelu_new"),
// attention scaled by 1/sqrt(head size), MLP width 4C, tied embeddings.
#include <cstdint>

#include "checkpoint/hf_arch.h"
#include "core/error.h"

namespace pptrain {
namespace {

// pptrain's layernorm epsilon (backend/ops.h, every backend and kernel).
constexpr double kLayerNormEps = 1e-5;
// GPT-2's <|endoftext|>, bos and eos of its tokenizer (vocabulary 50257).
constexpr int64_t kGpt2Vocab = 50257, kGpt2EndOfText = 50256;

// One tensor of block N: "transformer.h.N." + hf, "h.N." + pptrain; pptrain's shape is
// [rows·C] for vectors (cols 0) and [rows·C, cols·C] for matrices.
struct BlockTensor {
  const char* hf;
  const char* pptrain;
  int64_t rows, cols;
  HfLayout layout;
};
constexpr BlockTensor kBlock[] = {
    {"ln_1.weight", "ln_1.weight", 1, 0, HfLayout::Same},
    {"ln_1.bias", "ln_1.bias", 1, 0, HfLayout::Same},
    {"attn.c_attn.weight", "attn.qkv.weight", 3, 1, HfLayout::Conv1D},
    {"attn.c_attn.bias", "attn.qkv.bias", 3, 0, HfLayout::Same},
    {"attn.c_proj.weight", "attn.proj.weight", 1, 1, HfLayout::Conv1D},
    {"attn.c_proj.bias", "attn.proj.bias", 1, 0, HfLayout::Same},
    {"ln_2.weight", "ln_2.weight", 1, 0, HfLayout::Same},
    {"ln_2.bias", "ln_2.bias", 1, 0, HfLayout::Same},
    {"mlp.c_fc.weight", "mlp.fc.weight", 4, 1, HfLayout::Conv1D},
    {"mlp.c_fc.bias", "mlp.fc.bias", 4, 0, HfLayout::Same},
    {"mlp.c_proj.weight", "mlp.proj.weight", 1, 4, HfLayout::Conv1D},
    {"mlp.c_proj.bias", "mlp.proj.bias", 1, 0, HfLayout::Same},
};

std::vector<HfTensor> gpt2_tensors(const ModelConfig& m) {
  const int64_t V = m.vocab_size, T = m.seq_len, C = m.d_model;
  std::vector<HfTensor> t = {{"transformer.wte.weight", "wte.weight", {V, C}, HfLayout::Same},
                             {"transformer.wpe.weight", "wpe.weight", {T, C}, HfLayout::Same}};
  for (int l = 0; l < m.n_layer; ++l)
    for (const BlockTensor& b : kBlock) {
      std::vector<int64_t> shape = {b.rows * C};
      if (b.cols) shape.push_back(b.cols * C);
      t.push_back({cat("transformer.h.", l, ".", b.hf), cat("h.", l, ".", b.pptrain), shape, b.layout});
    }
  t.push_back({"transformer.ln_f.weight", "ln_f.weight", {C}, HfLayout::Same});
  t.push_back({"transformer.ln_f.bias", "ln_f.bias", {C}, HfLayout::Same});
  return t;
}

ModelConfig gpt2_read_config(const YAML::Node& config, const std::string& where) {
  ModelConfig m;
  m.arch = "gpt2";
  m.n_layer = int(hf_config_int(config, "n_layer", 1, kMaxLayers, where));
  m.n_head = int(hf_config_int(config, "n_head", 1, kMaxWidth, where));
  m.d_model = int(hf_config_int(config, "n_embd", 1, kMaxWidth, where));
  m.seq_len = int(hf_config_int(config, "n_positions", 1, kMaxSeqLen, where));
  m.vocab_size = int(hf_config_int(config, "vocab_size", 2, kMaxVocab, where));
  m.tie_embeddings = true;
  if (m.d_model % m.n_head != 0) fail(where, ": n_embd ", m.d_model, " is not a multiple of n_head ", m.n_head);

  const auto eps = hf_config_value(config, "layer_norm_epsilon", where);
  if (eps && json::as_number(*eps) != kLayerNormEps)
    fail(where, ": layer_norm_epsilon is ", json::describe(*eps), ", but pptrain's LayerNorm uses ",
         json::number(kLayerNormEps), " (the weights would compute another model)");
  const auto inner = hf_config_value(config, "n_inner", where);
  if (inner && !json::is_null(*inner) && json::as_uint(*inner) != uint64_t(4) * uint64_t(m.d_model))
    fail(where, ": n_inner is ", json::describe(*inner), ", but pptrain's MLP is 4 x n_embd = ", 4 * int64_t(m.d_model),
         " wide (expected null or that)");
  hf_config_require(config, "activation_function", {"\"gelu_new\"", "\"gelu_pytorch_tanh\""},
                    "pptrain's MLP computes the tanh GELU", where);
  hf_config_require(config, "scale_attn_weights", {"true"}, "pptrain scales attention by 1/sqrt(head size)", where);
  hf_config_require(config, "scale_attn_by_inverse_layer_idx", {"false"},
                    "pptrain does not scale attention by layer", where);
  hf_config_require(config, "add_cross_attention", {"false"}, "pptrain's GPT-2 has no cross-attention", where);
  hf_config_require(config, "tie_word_embeddings", {"true"}, "pptrain's GPT-2 ties the LM head to wte", where);
  return m;
}

std::string gpt2_write_config(const ModelConfig& m, const std::string& torch_dtype) {
  // GPT-2's tokenizer has <|endoftext|> as bos and eos; for another vocabulary pptrain
  // does not know the tokenizer's ids.
  const std::string special = m.vocab_size == kGpt2Vocab ? std::to_string(kGpt2EndOfText) : "null";
  return cat("{\n"
             "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
             "  \"model_type\": \"gpt2\",\n"
             "  \"vocab_size\": ", m.vocab_size, ",\n"
             "  \"n_positions\": ", m.seq_len, ",\n"
             "  \"n_embd\": ", m.d_model, ",\n"
             "  \"n_layer\": ", m.n_layer, ",\n"
             "  \"n_head\": ", m.n_head, ",\n"
             "  \"n_inner\": null,\n"
             "  \"activation_function\": \"gelu_new\",\n"
             "  \"layer_norm_epsilon\": ", json::number(kLayerNormEps), ",\n"
             "  \"resid_pdrop\": 0.0,\n"
             "  \"embd_pdrop\": 0.0,\n"
             "  \"attn_pdrop\": 0.0,\n"
             "  \"scale_attn_weights\": true,\n"
             "  \"tie_word_embeddings\": true,\n"
             "  \"bos_token_id\": ", special, ",\n"
             "  \"eos_token_id\": ", special, ",\n"
             "  \"torch_dtype\": ", json::quote(torch_dtype), "\n"
             "}\n");
}

}  // namespace

HfArchitecture hf_gpt2() {
  HfArchitecture a;
  a.hf_class = "GPT2LMHeadModel";
  a.model_type = "gpt2";
  a.arch = "gpt2";
  a.base_prefix = "transformer.";
  a.tied = [](const ModelConfig&) {
    return std::vector<std::pair<std::string, std::string>>{{"lm_head.weight", "transformer.wte.weight"}};
  };
  a.ignored_suffixes = {".attn.bias", ".attn.masked_bias"};
  a.read_config = gpt2_read_config;
  a.write_config = gpt2_write_config;
  a.tensors = gpt2_tensors;
  return a;
}

}  // namespace pptrain
