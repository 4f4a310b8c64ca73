// MistralForCausalLM <-> pptrain's mistral: Llama's decoder layer (hf_llama_family.h), with
// head_dim often set apart from hidden_size / num_attention_heads (Mistral Nemo: 5120 wide,
// 32 heads of 128). Mistral 7B v0.1's sliding-window attention (each query sees the last
// sliding_window keys) is not computed: pptrain's attention is fully causal, so only
// sliding_window null is taken (v0.2 and later); MistralConfig's default, when the key is
// absent, is a window of 4096, refused likewise.
#include "checkpoint/hf_llama_family.h"
#include "core/error.h"

namespace pptrain {

HfArchitecture hf_mistral() {
  LlamaFamily f;
  f.hf_class = "MistralForCausalLM";
  f.model_type = "mistral";
  f.arch = "mistral";
  // MistralConfig's defaults (transformers' configuration_mistral.py).
  f.default_max_positions = 4096 * 32;
  f.default_rms_norm_eps = 1e-6;
  f.default_rope_theta = 10000.0;
  f.check_keys = [](const YAML::Node& config, const ModelConfig&, const std::string& where) {
    const auto window = hf_config_value(config, "sliding_window", where);
    if (!window)
      fail(where, ": sliding_window is absent, which MistralConfig takes as a window of 4096; pptrain's attention "
           "is fully causal (expected sliding_window: null)");
    if (!json::is_null(*window))
      fail(where, ": sliding_window is ", json::describe(*window),
           "; pptrain's attention is fully causal, not a sliding window (expected null)");
  };
  f.extra_keys = [](const ModelConfig&) { return std::string("  \"sliding_window\": null,\n"); };
  return hf_llama_family(f);
}

}  // namespace pptrain
