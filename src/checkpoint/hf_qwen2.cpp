// Qwen2ForCausalLM (Qwen2, Qwen2.5) <-> pptrain's qwen2: Llama's decoder layer
// (hf_llama_family.h) with biases on q_proj, k_proj and v_proj (stacked, like their
// weights, into attn.qkv.bias; none on o_proj or the MLP), rope_theta usually 1e6. Its
// sliding-window attention is off unless use_sliding_window is true, which pptrain refuses
// (its attention is fully causal), as any layer_types entry but full_attention.
#include "checkpoint/hf_llama_family.h"
#include "core/error.h"

namespace pptrain {

HfArchitecture hf_qwen2() {
  LlamaFamily f;
  f.hf_class = "Qwen2ForCausalLM";
  f.model_type = "qwen2";
  f.arch = "qwen2";
  // Qwen2Config's defaults (transformers' configuration_qwen2.py).
  f.default_max_positions = 32768;
  f.default_rms_norm_eps = 1e-6;
  f.default_rope_theta = 10000.0;
  f.check_keys = [](const YAML::Node& config, const ModelConfig&, const std::string& where) {
    refuse_qwen_sliding_window(config, where);
  };
  f.extra_keys = [](const ModelConfig& m) {
    return cat("  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n  \"max_window_layers\": ", m.n_layer,
               ",\n");
  };
  return hf_llama_family(f);
}

}  // namespace pptrain
