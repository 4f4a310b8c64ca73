// The Hugging Face classes whose decoder layer is Llama's (model/llama_block.h): one tensor
// table and one config.json mapping (hf_llama.cpp), parameterised by what each class
// changes. Each class is its own HfArchitecture in its own file: hf_llama.cpp
// (LlamaForCausalLM), hf_mistral.cpp (MistralForCausalLM), hf_qwen2.cpp (Qwen2ForCausalLM).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/hf_arch.h"

namespace pptrain {

struct LlamaFamily {
  std::string hf_class, model_type, arch;
  // The config class's defaults (transformers' configuration_<model>.py) for keys a file
  // may lack.
  int64_t default_max_positions = 2048;
  double default_rms_norm_eps = 1e-6, default_rope_theta = 10000.0;
  bool default_tie_embeddings = false;
  // Reads and checks what only this class has (sliding windows, bias switches), after the
  // shared keys; `m` is the model read so far.
  std::function<void(const YAML::Node& config, const ModelConfig& m, const std::string& where)> check_keys;
  // config.json lines only this class writes ("  \"sliding_window\": null,\n"), or "".
  std::function<std::string(const ModelConfig& m)> extra_keys;
};

HfArchitecture hf_llama_family(const LlamaFamily& family);

// Qwen2's and Qwen3's sliding-window switches: use_sliding_window true, or a layer_types
// entry other than "full_attention", is refused (pptrain's attention is fully causal).
void refuse_qwen_sliding_window(const YAML::Node& config, const std::string& where);

}  // namespace pptrain
