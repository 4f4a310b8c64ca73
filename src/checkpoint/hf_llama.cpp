// LlamaForCausalLM <-> pptrain's llama, and the table every Llama-family class shares
// (hf_llama_family.h: Mistral, Qwen2).
//
// transformers' Llama computes what pptrain's (model/llama_block.h) does, tensor for
// tensor, with no permutation: RMSNorm with its weight and eps inside the square root;
// q_proj [NH·HD, C], k_proj and v_proj [NKV·HD, C] (heads contiguous, as q.view(B, T, NH,
// HD) reads them) stacked along dim 0 are pptrain's qkv rows (their biases, where the
// class has them, its qkv bias); o_proj [C, NH·HD]; the rotary embedding in the
// rotate-half convention (the halves of each head are a plane's two coordinates, as
// backend/cpu/rotary.cpp turns them; files converted from Meta's interleaved layout were
// permuted by transformers' converter already) with the inverse frequencies of
// core/rotary.h and positions 0..T-1; query head h reads key/value head h / (NH/NKV)
// (repeat_kv); scores scaled by 1/sqrt(HD); down(silu(gate(x)) ∘ up(x)). The LM head is
// lm_head.weight, or the token embedding when tie_word_embeddings (then a file may hold
// lm_head.weight only as an equal copy).
//
// config.json -> model: hidden_size d_model, num_hidden_layers n_layer,
// num_attention_heads n_head, num_key_value_heads n_kv_head, head_dim (when it is not
// hidden_size / num_attention_heads), intermediate_size ffn_hidden, vocab_size,
// rms_norm_eps norm_eps, rope_theta and rope_scaling (or transformers 5's rope_parameters:
// rope_type default, linear or llama3 with their factors; yarn, dynamic, longrope and the
// rest are refused naming the type), tie_word_embeddings; absent keys take the config
// class's defaults, as transformers loads them. Export writes both rotary spellings, for
// transformers 4 and 5. max_position_embeddings becomes seq_len: the context the model
// was trained for. pptrain's Llama family has no tensor that depends on seq_len, so
// training may then use a shorter one (model.seq_len=N with checkpoint.resume); export
// writes the checkpoint's seq_len back. Keys that change what the model computes must
// hold what pptrain computes: hidden_act silu, no biases but the class's own.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "checkpoint/hf_llama_family.h"
#include "core/error.h"

namespace pptrain {
namespace {

// Llama 3's tokenizer: 128256 ids, <|begin_of_text|> and <|end_of_text|>.
constexpr int64_t kLlama3Vocab = 128256, kLlama3Bos = 128000, kLlama3Eos = 128001;

std::vector<HfTensor> llama_tensors(const ModelConfig& m) {
  const int64_t V = m.vocab_size, C = m.d_model, F = m.mlp_hidden();
  const int64_t HD = m.attention_head_dim(), Q = m.n_head * HD, KV = m.kv_heads() * HD;
  std::vector<HfTensor> t = {{"model.embed_tokens.weight", "wte.weight", {V, C}}};
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string hf = cat("model.layers.", l, "."), ours = cat("h.", l, ".");
    t.push_back({hf + "input_layernorm.weight", ours + "ln_1.weight", {C}});
    HfTensor qkv{"", ours + "attn.qkv.weight", {Q + 2 * KV, C}, HfLayout::RowStack};
    qkv.stack = {{hf + "self_attn.q_proj.weight", {Q, C}},
                 {hf + "self_attn.k_proj.weight", {KV, C}},
                 {hf + "self_attn.v_proj.weight", {KV, C}}};
    t.push_back(qkv);
    if (m.qkv_bias()) {
      HfTensor bias{"", ours + "attn.qkv.bias", {Q + 2 * KV}, HfLayout::RowStack};
      bias.stack = {{hf + "self_attn.q_proj.bias", {Q}},
                    {hf + "self_attn.k_proj.bias", {KV}},
                    {hf + "self_attn.v_proj.bias", {KV}}};
      t.push_back(bias);
    }
    if (m.qk_norm()) {
      t.push_back({hf + "self_attn.q_norm.weight", ours + "attn.q_norm.weight", {HD}});
      t.push_back({hf + "self_attn.k_norm.weight", ours + "attn.k_norm.weight", {HD}});
    }
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

// One rope scaling object (transformers 4's rope_scaling, or 5's rope_parameters, which
// also holds rope_theta) into `scaling`; returns its rope_theta when it has one.
std::optional<double> read_rope_object(const YAML::Node& params, const std::string& where, RopeScaling& scaling) {
  if (!params.IsMap()) fail(where, " is ", json::describe(params), ", expected an object");
  // "type" is the spelling of transformers before 4.43; given both, they must agree.
  const auto rope_type = hf_config_value(params, "rope_type", where);
  const auto old_type = hf_config_value(params, "type", where);
  const auto& type_node = rope_type ? rope_type : old_type;
  if (!type_node || !json::is_string(*type_node)) fail(where, ": rope_type is missing or not a string");
  if (rope_type && old_type && json::describe(*rope_type) != json::describe(*old_type))
    fail(where, ": rope_type ", json::describe(*rope_type), " and type ", json::describe(*old_type), " differ");
  const std::string type = type_node->Scalar();
  std::vector<std::string> keys = {"rope_type", "type", "rope_theta"};
  if (type == "default") {
    scaling = RopeScaling{};
  } else if (type == "linear") {
    scaling = RopeScaling{"linear", hf_config_number(params, "factor", 0, 1e6, 0, where)};
    keys.push_back("factor");
  } else if (type == "llama3") {
    scaling.type = "llama3";
    scaling.factor = hf_config_number(params, "factor", 0, 1e6, 0, where);
    scaling.low_freq_factor = hf_config_number(params, "low_freq_factor", 0, 1e6, 0, where);
    scaling.high_freq_factor = hf_config_number(params, "high_freq_factor", 0, 1e6, 0, where);
    scaling.original_max_positions =
        int(hf_config_int(params, "original_max_position_embeddings", 1, kMaxSeqLen, where));
    if (!(scaling.high_freq_factor > scaling.low_freq_factor))
      fail(where, ": high_freq_factor ", hf_number(scaling.high_freq_factor), " is not above low_freq_factor ",
           hf_number(scaling.low_freq_factor));
    keys.insert(keys.end(), {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  } else {
    fail(where, ": rope_type ", json::describe(*type_node),
         " is not one pptrain's rotary embedding computes (default, linear, llama3); the weights would compute "
         "another model");
  }
  if (scaling.type != "none" && !(scaling.factor > 0)) fail(where, ": factor is missing or not above 0");
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string key = json::is_string(it->first) ? it->first.Scalar() : "";
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      fail(where, ": ", json::describe(it->first), " is not a key pptrain's ", type, " rotary embedding computes");
  }
  if (!hf_config_value(params, "rope_theta", where)) return std::nullopt;
  return hf_config_number(params, "rope_theta", 1, 1e12, 0, where);
}

// The rotary base and scaling. transformers before 5 writes rope_theta and rope_scaling at
// the top; transformers 5 writes rope_parameters {rope_type, rope_theta, ...} instead.
// Both spellings are read; given both, they must agree.
void read_rope(const YAML::Node& config, double default_theta, const std::string& where, ModelConfig& m) {
  m.rope_theta = hf_config_number(config, "rope_theta", 1, 1e12, default_theta, where);
  const auto top = hf_config_value(config, "rope_scaling", where);
  if (top && !json::is_null(*top)) read_rope_object(*top, where + ": rope_scaling", m.rope_scaling);
  const auto params = hf_config_value(config, "rope_parameters", where);
  if (!params || json::is_null(*params)) return;
  RopeScaling inner;
  const std::optional<double> theta = read_rope_object(*params, where + ": rope_parameters", inner);
  if (theta && hf_config_value(config, "rope_theta", where) && *theta != m.rope_theta)
    fail(where, ": rope_theta ", hf_number(m.rope_theta), " and rope_parameters' rope_theta ", hf_number(*theta),
         " differ");
  if (top && !json::is_null(*top) && !(inner == m.rope_scaling))
    fail(where, ": rope_scaling and rope_parameters describe different scalings");
  if (theta) m.rope_theta = *theta;
  m.rope_scaling = inner;
}

ModelConfig read_config(const LlamaFamily& family, const YAML::Node& config, const std::string& where) {
  ModelConfig m;
  m.arch = family.arch;
  m.n_layer = int(hf_config_int(config, "num_hidden_layers", 1, kMaxLayers, where));
  m.n_head = int(hf_config_int(config, "num_attention_heads", 1, kMaxWidth, where));
  m.d_model = int(hf_config_int(config, "hidden_size", 1, kMaxWidth, where));
  m.n_kv_head = int(hf_config_int(config, "num_key_value_heads", 1, m.n_head, where, m.n_head));
  m.ffn_hidden = int(hf_config_int(config, "intermediate_size", 1, 4 * int64_t(kMaxWidth), where));
  m.seq_len =
      int(hf_config_int(config, "max_position_embeddings", 1, kMaxSeqLen, where, family.default_max_positions));
  m.vocab_size = int(hf_config_int(config, "vocab_size", 2, kMaxVocab, where));
  m.norm_eps = hf_config_number(config, "rms_norm_eps", 0, 1, family.default_rms_norm_eps, where);
  read_rope(config, family.default_rope_theta, where, m);
  m.tie_embeddings = hf_config_bool(config, "tie_word_embeddings", family.default_tie_embeddings, where);
  if (m.n_head % m.n_kv_head != 0)
    fail(where, ": num_key_value_heads ", m.n_kv_head, " does not divide num_attention_heads ", m.n_head,
         " (each key/value head serves a group of query heads)");
  // head_dim: absent or null means hidden_size / num_attention_heads (Mistral and Qwen set it).
  const auto hd = hf_config_value(config, "head_dim", where);
  if (hd && !json::is_null(*hd)) {
    const int64_t head_dim = hf_config_int(config, "head_dim", 2, 2 * kMaxRotaryPlanes, where);
    if (m.d_model % m.n_head != 0 || head_dim != m.d_model / m.n_head) m.head_dim = int(head_dim);
  } else if (m.d_model % m.n_head != 0) {
    fail(where, ": hidden_size ", m.d_model, " is not a multiple of num_attention_heads ", m.n_head,
         " and head_dim is not given");
  }
  if (m.attention_head_dim() % 2 != 0 || m.attention_head_dim() > 2 * kMaxRotaryPlanes)
    fail(where, ": the head size ", m.attention_head_dim(), " is odd or above ", 2 * kMaxRotaryPlanes,
         " (the rotary embedding turns pairs)");
  hf_config_require(config, "hidden_act", {"\"silu\""}, "pptrain's MLP computes SiLU-gated units (SwiGLU)", where);
  hf_config_require(config, "mlp_bias", {"false"}, "pptrain's Llama-family MLP has no biases", where);
  hf_config_require(config, "partial_rotary_factor", {"1.0", "1"},
                    "pptrain's rotary embedding turns the whole head", where);
  if (family.check_keys) family.check_keys(config, m, where);
  return m;
}

// rope_scaling (transformers 4) and rope_parameters (5) of `m`, as config.json lines.
std::string rope_lines(const ModelConfig& m) {
  const RopeScaling& r = m.rope_scaling;
  const std::string theta = hf_number(m.rope_theta);
  std::string fields;
  if (r.type == "linear") fields = cat(", \"factor\": ", hf_number(r.factor));
  if (r.type == "llama3")
    fields = cat(", \"factor\": ", hf_number(r.factor), ", \"low_freq_factor\": ", hf_number(r.low_freq_factor),
                 ", \"high_freq_factor\": ", hf_number(r.high_freq_factor),
                 ", \"original_max_position_embeddings\": ", r.original_max_positions);
  const std::string type = r.type == "none" ? "default" : r.type;
  const std::string scaling = r.type == "none" ? "null" : cat("{\"rope_type\": \"", type, "\"", fields, "}");
  return cat("  \"rope_theta\": ", theta, ",\n",
             "  \"rope_scaling\": ", scaling, ",\n",
             "  \"rope_parameters\": {\"rope_type\": \"", type, "\", \"rope_theta\": ", theta, fields, "},\n");
}

std::string write_config(const LlamaFamily& family, const ModelConfig& m, const std::string& torch_dtype) {
  // Llama 3's tokenizer has known bos and eos ids; for another vocabulary pptrain does not
  // know the tokenizer's.
  const bool llama3 = m.vocab_size == kLlama3Vocab;
  const std::string bos = llama3 ? std::to_string(kLlama3Bos) : "null";
  const std::string eos = llama3 ? std::to_string(kLlama3Eos) : "null";
  return cat("{\n"
             "  \"architectures\": [\"", family.hf_class, "\"],\n"
             "  \"model_type\": \"", family.model_type, "\",\n"
             "  \"vocab_size\": ", m.vocab_size, ",\n"
             "  \"hidden_size\": ", m.d_model, ",\n"
             "  \"intermediate_size\": ", m.mlp_hidden(), ",\n"
             "  \"num_hidden_layers\": ", m.n_layer, ",\n"
             "  \"num_attention_heads\": ", m.n_head, ",\n"
             "  \"num_key_value_heads\": ", m.kv_heads(), ",\n"
             "  \"head_dim\": ", m.attention_head_dim(), ",\n"
             "  \"hidden_act\": \"silu\",\n"
             "  \"max_position_embeddings\": ", m.seq_len, ",\n"
             "  \"rms_norm_eps\": ", hf_number(m.norm_eps), ",\n",
             rope_lines(m),
             family.extra_keys ? family.extra_keys(m) : std::string(),
             "  \"attention_dropout\": 0.0,\n"
             "  \"initializer_range\": 0.02,\n"
             "  \"use_cache\": true,\n"
             "  \"tie_word_embeddings\": ", m.tie_embeddings ? "true" : "false", ",\n"
             "  \"bos_token_id\": ", bos, ",\n"
             "  \"eos_token_id\": ", eos, ",\n"
             "  \"torch_dtype\": ", json::quote(torch_dtype), "\n"
             "}\n");
}

}  // namespace

void refuse_qwen_sliding_window(const YAML::Node& config, const std::string& where) {
  if (hf_config_bool(config, "use_sliding_window", false, where))
    fail(where, ": use_sliding_window is true; pptrain's attention is fully causal, not a sliding window "
         "(expected false)");
  const auto layers = hf_config_value(config, "layer_types", where);
  if (!layers || json::is_null(*layers)) return;
  if (!layers->IsSequence()) fail(where, ": layer_types is ", json::describe(*layers), ", expected a list");
  for (const YAML::Node& l : *layers)
    if (!json::is_string(l) || l.Scalar() != "full_attention")
      fail(where, ": layer_types holds ", json::describe(l),
           "; pptrain's attention is fully causal (expected only \"full_attention\")");
}

HfArchitecture hf_llama_family(const LlamaFamily& family) {
  HfArchitecture a;
  a.hf_class = family.hf_class;
  a.model_type = family.model_type;
  a.arch = family.arch;
  a.base_prefix = "model.";
  a.tied = [](const ModelConfig& m) {
    std::vector<std::pair<std::string, std::string>> tied;
    if (m.tie_embeddings) tied.push_back({"lm_head.weight", "model.embed_tokens.weight"});
    return tied;
  };
  a.ignored_suffixes = {".rotary_emb.inv_freq"};
  a.read_config = [family](const YAML::Node& config, const std::string& where) {
    return read_config(family, config, where);
  };
  a.write_config = [family](const ModelConfig& m, const std::string& torch_dtype) {
    return write_config(family, m, torch_dtype);
  };
  a.tensors = llama_tensors;
  return a;
}

HfArchitecture hf_llama() {
  LlamaFamily f;
  f.hf_class = "LlamaForCausalLM";
  f.model_type = "llama";
  f.arch = "llama";
  // LlamaConfig's defaults (transformers' configuration_llama.py).
  f.default_max_positions = 2048;
  f.default_rms_norm_eps = 1e-6;
  f.default_rope_theta = 10000.0;
  f.check_keys = [](const YAML::Node& config, const ModelConfig&, const std::string& where) {
    hf_config_require(config, "attention_bias", {"false"},
                      "pptrain's llama has no attention biases (qwen2 has them on q, k, v only)", where);
  };
  f.extra_keys = [](const ModelConfig&) {
    return std::string("  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"pretraining_tp\": 1,\n");
  };
  return hf_llama_family(f);
}

}  // namespace pptrain
