// LlamaForCausalLM <-> pptrain's llama: the tensor table and config.json.
//
// transformers' Llama computes what pptrain's (model/llama_block.h) does, tensor for
// tensor, with no permutation: RMSNorm with its weight and eps inside the square root;
// q_proj [NH·HD, C], k_proj and v_proj [NKV·HD, C] (heads contiguous, as q.view(B, T, NH,
// HD) reads them) stacked along dim 0 are pptrain's qkv rows; the rotary embedding in the
// rotate-half convention (the halves of each head are a plane's two coordinates, as
// backend/cpu/rotary.cpp turns them; files converted from Meta's interleaved layout were
// permuted by transformers' converter already) with inv_freq = theta^(-2i/HD) and
// positions 0..T-1; query head h reads key/value head h / (NH/NKV) (repeat_kv); scores
// scaled by 1/sqrt(HD); down(silu(gate(x)) ∘ up(x)); no biases. The LM head is
// lm_head.weight, or the token embedding when tie_word_embeddings (then a file may hold
// lm_head.weight only as an equal copy).
//
// config.json -> model: hidden_size d_model, num_hidden_layers n_layer,
// num_attention_heads n_head, num_key_value_heads n_kv_head, intermediate_size
// ffn_hidden, vocab_size, rms_norm_eps norm_eps, rope_theta (or transformers 5's
// rope_parameters), tie_word_embeddings; absent keys take LlamaConfig's defaults, as
// transformers loads them. Export writes both rotary spellings, for transformers 4 and 5.
// max_position_embeddings becomes seq_len: the context the model was trained for.
// pptrain's llama has no tensor that depends on seq_len, so training may then use a
// shorter one (model.seq_len=N with checkpoint.resume); export writes the checkpoint's
// seq_len back. Keys that change what
// the model computes must hold what pptrain computes: hidden_act silu, no attention or
// MLP bias, no rope_scaling and rope_parameters' rope_type "default" (not Llama 3.1's
// "llama3" frequency scaling, linear, dynamic, yarn: pptrain's rotary has none), head_dim
// = hidden_size / num_attention_heads.
#include <cstdint>

#include "checkpoint/hf_arch.h"
#include "core/error.h"

namespace pptrain {
namespace {

// LlamaConfig's defaults (transformers' configuration_llama.py) for keys a file may lack.
constexpr int64_t kDefaultMaxPositions = 2048;
constexpr double kDefaultRmsNormEps = 1e-6, kDefaultRopeTheta = 10000.0;
// Llama 3's tokenizer: 128256 ids, <|begin_of_text|> and <|end_of_text|>.
constexpr int64_t kLlama3Vocab = 128256, kLlama3Bos = 128000, kLlama3Eos = 128001;

std::vector<HfTensor> llama_tensors(const ModelConfig& m) {
  const int64_t V = m.vocab_size, C = m.d_model, F = m.mlp_hidden();
  const int64_t HD = m.d_model / m.n_head, Q = m.n_head * HD, KV = m.kv_heads() * HD;
  std::vector<HfTensor> t = {{"model.embed_tokens.weight", "wte.weight", {V, C}}};
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string hf = cat("model.layers.", l, "."), ours = cat("h.", l, ".");
    t.push_back({hf + "input_layernorm.weight", ours + "ln_1.weight", {C}});
    HfTensor qkv{"", ours + "attn.qkv.weight", {Q + 2 * KV, C}, HfLayout::RowStack};
    qkv.stack = {{hf + "self_attn.q_proj.weight", {Q, C}},
                 {hf + "self_attn.k_proj.weight", {KV, C}},
                 {hf + "self_attn.v_proj.weight", {KV, C}}};
    t.push_back(qkv);
    t.push_back({hf + "self_attn.o_proj.weight", ours + "attn.proj.weight", {C, Q}});
    t.push_back({hf + "post_attention_layernorm.weight", ours + "ln_2.weight", {C}});
    t.push_back({hf + "mlp.gate_proj.weight", ours + "mlp.gate.weight", {F, C}});
    t.push_back({hf + "mlp.up_proj.weight", ours + "mlp.up.weight", {F, C}});
    t.push_back({hf + "mlp.down_proj.weight", ours + "mlp.down.weight", {C, F}});
  }
  t.push_back({"model.norm.weight", "ln_f.weight", {C}});
  if (!m.tie_embeddings) t.push_back({"lm_head.weight", "lm_head.weight", {V, C}});
  return t;
}

// The rotary base. transformers before 5 writes rope_theta and rope_scaling at the top;
// transformers 5 writes rope_parameters {rope_type, rope_theta} instead. Both spellings
// are read; given both, they must agree.
double read_rope_theta(const YAML::Node& config, const std::string& where) {
  const double theta = hf_config_number(config, "rope_theta", 1, 1e12, kDefaultRopeTheta, where);
  const auto params = hf_config_value(config, "rope_parameters", where);
  if (!params || json::is_null(*params)) return theta;
  const std::string in_params = where + ": rope_parameters";
  if (!params->IsMap()) fail(where, ": rope_parameters is ", json::describe(*params), ", expected an object");
  hf_config_require(*params, "rope_type", {"\"default\""},
                    "pptrain's rotary embedding has no frequency scaling (the weights would compute another model)",
                    in_params);
  for (auto it = params->begin(); it != params->end(); ++it) {
    const std::string key = json::is_string(it->first) ? it->first.Scalar() : "";
    if (key != "rope_type" && key != "rope_theta")
      fail(in_params, ": ", json::describe(it->first), " is not a key pptrain's rotary embedding computes (expected ",
           "only rope_type \"default\" and rope_theta)");
  }
  const double inner = hf_config_number(*params, "rope_theta", 1, 1e12, theta, in_params);
  if (hf_config_value(config, "rope_theta", where) && inner != theta)
    fail(where, ": rope_theta ", hf_number(theta), " and rope_parameters' rope_theta ", hf_number(inner), " differ");
  return inner;
}

ModelConfig llama_read_config(const YAML::Node& config, const std::string& where) {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = int(hf_config_int(config, "num_hidden_layers", 1, kMaxLayers, where));
  m.n_head = int(hf_config_int(config, "num_attention_heads", 1, kMaxWidth, where));
  m.d_model = int(hf_config_int(config, "hidden_size", 1, kMaxWidth, where));
  m.n_kv_head = int(hf_config_int(config, "num_key_value_heads", 1, m.n_head, where, m.n_head));
  m.ffn_hidden = int(hf_config_int(config, "intermediate_size", 1, 4 * int64_t(kMaxWidth), where));
  m.seq_len = int(hf_config_int(config, "max_position_embeddings", 1, kMaxSeqLen, where, kDefaultMaxPositions));
  m.vocab_size = int(hf_config_int(config, "vocab_size", 2, kMaxVocab, where));
  m.norm_eps = hf_config_number(config, "rms_norm_eps", 0, 1, kDefaultRmsNormEps, where);
  m.rope_theta = read_rope_theta(config, where);
  m.tie_embeddings = hf_config_bool(config, "tie_word_embeddings", false, where);
  if (m.d_model % m.n_head != 0)
    fail(where, ": hidden_size ", m.d_model, " is not a multiple of num_attention_heads ", m.n_head);
  if (m.n_head % m.n_kv_head != 0)
    fail(where, ": num_key_value_heads ", m.n_kv_head, " does not divide num_attention_heads ", m.n_head,
         " (each key/value head serves a group of query heads)");
  const int64_t head_dim = m.d_model / m.n_head;
  if (head_dim % 2 != 0)
    fail(where, ": the head size hidden_size/num_attention_heads = ", head_dim,
         " is odd (the rotary embedding turns pairs)");
  const auto hd = hf_config_value(config, "head_dim", where);
  if (hd && !json::is_null(*hd) && json::as_uint(*hd) != uint64_t(head_dim))
    fail(where, ": head_dim is ", json::describe(*hd), ", but pptrain's heads are hidden_size/num_attention_heads = ",
         head_dim, " wide (expected null or that)");
  hf_config_require(config, "hidden_act", {"\"silu\""}, "pptrain's MLP computes SiLU-gated units (SwiGLU)", where);
  hf_config_require(config, "attention_bias", {"false"}, "pptrain's Llama attention has no biases", where);
  hf_config_require(config, "mlp_bias", {"false"}, "pptrain's Llama MLP has no biases", where);
  hf_config_require(config, "rope_scaling", {"null"},
                    "pptrain's rotary embedding has no frequency scaling (the weights would compute another model)",
                    where);
  return m;
}

std::string llama_write_config(const ModelConfig& m, const std::string& torch_dtype) {
  // Llama 3's tokenizer has known bos and eos ids; for another vocabulary pptrain does not
  // know the tokenizer's.
  const bool llama3 = m.vocab_size == kLlama3Vocab;
  const std::string bos = llama3 ? std::to_string(kLlama3Bos) : "null";
  const std::string eos = llama3 ? std::to_string(kLlama3Eos) : "null";
  return cat("{\n"
             "  \"architectures\": [\"LlamaForCausalLM\"],\n"
             "  \"model_type\": \"llama\",\n"
             "  \"vocab_size\": ", m.vocab_size, ",\n"
             "  \"hidden_size\": ", m.d_model, ",\n"
             "  \"intermediate_size\": ", m.mlp_hidden(), ",\n"
             "  \"num_hidden_layers\": ", m.n_layer, ",\n"
             "  \"num_attention_heads\": ", m.n_head, ",\n"
             "  \"num_key_value_heads\": ", m.kv_heads(), ",\n"
             "  \"head_dim\": ", m.d_model / m.n_head, ",\n"
             "  \"hidden_act\": \"silu\",\n"
             "  \"max_position_embeddings\": ", m.seq_len, ",\n"
             "  \"rms_norm_eps\": ", hf_number(m.norm_eps), ",\n"
             "  \"rope_theta\": ", hf_number(m.rope_theta), ",\n"
             "  \"rope_scaling\": null,\n"
             "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": ", hf_number(m.rope_theta), "},\n"
             "  \"attention_bias\": false,\n"
             "  \"attention_dropout\": 0.0,\n"
             "  \"mlp_bias\": false,\n"
             "  \"pretraining_tp\": 1,\n"
             "  \"initializer_range\": 0.02,\n"
             "  \"use_cache\": true,\n"
             "  \"tie_word_embeddings\": ", m.tie_embeddings ? "true" : "false", ",\n"
             "  \"bos_token_id\": ", bos, ",\n"
             "  \"eos_token_id\": ", eos, ",\n"
             "  \"torch_dtype\": ", json::quote(torch_dtype), "\n"
             "}\n");
}

}  // namespace

HfArchitecture hf_llama() {
  HfArchitecture a;
  a.hf_class = "LlamaForCausalLM";
  a.model_type = "llama";
  a.arch = "llama";
  a.base_prefix = "model.";
  a.tied = [](const ModelConfig& m) {
    std::vector<std::pair<std::string, std::string>> tied;
    if (m.tie_embeddings) tied.push_back({"lm_head.weight", "model.embed_tokens.weight"});
    return tied;
  };
  a.ignored_suffixes = {".rotary_emb.inv_freq"};
  a.read_config = llama_read_config;
  a.write_config = llama_write_config;
  a.tensors = llama_tensors;
  return a;
}

}  // namespace pptrain
