// Qwen3ForCausalLM <-> pptrain's qwen3: Llama's decoder layer (hf_llama_family.h) with an
// RMSNorm of each query and key head before the rotary embedding (self_attn.q_norm and
// k_norm, [head_dim] each; transformers' Qwen3RMSNorm with rms_norm_eps), no biases
// (attention_bias true is refused), head_dim usually set apart from hidden_size /
// num_attention_heads (Qwen3 0.6B: 1024 wide, 16 heads of 128). Its sliding-window
// attention is off unless use_sliding_window is true, which pptrain refuses (its attention is
// fully causal), as any layer_types entry but full_attention.
#include "checkpoint/hf_llama_family.h"
#include "core/error.h"

namespace pptrain {

HfArchitecture hf_qwen3() {
  LlamaFamily f;
  f.hf_class = "Qwen3ForCausalLM";
  f.model_type = "qwen3";
  f.arch = "qwen3";
  // Qwen3Config's defaults (transformers' configuration_qwen3.py).
  f.default_max_positions = 32768;
  f.default_rms_norm_eps = 1e-6;
  f.default_rope_theta = 10000.0;
  f.check_keys = [](const YAML::Node& config, const ModelConfig&, const std::string& where) {
    hf_config_require(config, "attention_bias", {"false"},
                      "pptrain's qwen3 has no attention biases (transformers' would add them to q, k, v and o_proj)",
                      where);
    refuse_qwen_sliding_window(config, where);
  };
  f.extra_keys = [](const ModelConfig& m) {
    return cat("  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
               "  \"max_window_layers\": ", m.n_layer, ",\n");
  };
  return hf_llama_family(f);
}

}  // namespace pptrain
