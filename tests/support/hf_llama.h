// The tiny Llama-family model of the Hugging Face interop tests (test_hf_llama): its
// config.json as each class's save_pretrained writes it (Llama, Llama 3.1's rope scaling,
// Mistral, Qwen2, Qwen3), random weights under transformers' names written as a model
// directory, the same weights set into a pptrain model, and the mean loss computed in double
// from transformers' formulas (RMSNorm, rotate-half RoPE, repeat_kv, SiLU-gated MLP, Qwen2's
// biases, Qwen3's per-head q/k norms).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/rotary.h"
#include "model/param.h"
#include "support/hf_files.h"
#include "support/single_rank_model.h"

namespace pptrain::testing {

// As save_pretrained writes a LlamaConfig (transformers 4.44), one key per line.
inline constexpr const char* kLlamaConfigJson = R"({
  "_name_or_path": "tiny-llama",
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 8,
  "hidden_act": "silu",
  "hidden_size": 32,
  "initializer_range": 0.02,
  "intermediate_size": 48,
  "max_position_embeddings": 6,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.44.0",
  "use_cache": true,
  "vocab_size": 13
})";

// kLlamaConfigJson's model: L 2, NH 4, NKV 2, C 32 (HD 8), F 48, T 6, V 13.
inline ModelConfig tiny_llama(bool tied) {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 32;
  m.ffn_hidden = 48;
  m.seq_len = 6;
  m.vocab_size = 13;
  m.rope_theta = 10000.0;
  m.norm_eps = 1e-5;
  m.tie_embeddings = tied;
  return m;
}

// The tiny model as another class of the Llama family writes it: Llama 3.1's rope scaling
// (llama3, in a band the 6 positions reach: original 4), Mistral (heads 16 wide, not 32/4),
// Qwen2 (q, k, v biases, theta 1e6), Qwen3 (per-head q and k norms, heads 16 wide).
enum class Family { Llama, Llama31, Mistral, Qwen2, Qwen3 };

inline ModelConfig family_model(Family f, bool tied) {
  ModelConfig m = tiny_llama(tied);
  if (f == Family::Llama31) m.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 4};
  if (f == Family::Mistral) m.arch = "mistral", m.head_dim = 16;
  if (f == Family::Qwen2) m.arch = "qwen2", m.rope_theta = 1e6;
  if (f == Family::Qwen3) m.arch = "qwen3", m.head_dim = 16;
  return m;
}

struct HfLlama : HfWeights {
  ModelConfig m;
  Family family;

  HfLlama(uint32_t seed, bool bf16, bool tied, Family f = Family::Llama) : m(family_model(f, tied)), family(f) {
    const int64_t C = m.d_model, V = m.vocab_size, F = m.ffn_hidden, HD = m.attention_head_dim();
    const int64_t Q = m.n_head * HD, KV = m.n_kv_head * HD;
    order = {{"model.embed_tokens.weight", {V, C}}};
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      for (auto [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
               {"input_layernorm.weight", {C}}, {"self_attn.q_proj.weight", {Q, C}},
               {"self_attn.k_proj.weight", {KV, C}}, {"self_attn.v_proj.weight", {KV, C}},
               {"self_attn.o_proj.weight", {C, Q}}, {"post_attention_layernorm.weight", {C}},
               {"mlp.gate_proj.weight", {F, C}}, {"mlp.up_proj.weight", {F, C}}, {"mlp.down_proj.weight", {C, F}}})
        order.push_back({h + name, shape});
      if (m.qkv_bias())
        for (auto [name, rows] : {std::pair{"q_proj", Q}, {"k_proj", KV}, {"v_proj", KV}})
          order.push_back({h + "self_attn." + name + ".bias", {rows}});
      if (m.qk_norm())
        for (const char* name : {"q_norm", "k_norm"}) order.push_back({h + "self_attn." + name + ".weight", {HD}});
    }
    order.push_back({"model.norm.weight", {C}});
    if (!tied) order.push_back({"lm_head.weight", {V, C}});
    randomise(seed, bf16, [](const std::string& name) { return name.ends_with("norm.weight"); });
  }

  std::string config() const {
    std::string c = config_with("tie_word_embeddings", m.tie_embeddings ? "true" : "false", kLlamaConfigJson);
    if (family == Family::Llama31)
      c = config_with("rope_scaling", R"({"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, )"
                                      R"("original_max_position_embeddings": 4, "rope_type": "llama3"})", c);
    if (family == Family::Mistral) {
      c = config_with("architectures", R"(["MistralForCausalLM"])", config_with("model_type", "\"mistral\"", c));
      c = config_with("head_dim", "16", config_with("rope_scaling", "null,\n  \"sliding_window\": null", c));
    }
    if (family == Family::Qwen3) {
      c = config_with("architectures", R"(["Qwen3ForCausalLM"])", config_with("model_type", "\"qwen3\"", c));
      c = config_with("head_dim", "16", config_with("attention_bias", "false,\n  \"use_sliding_window\": false", c));
    }
    if (family == Family::Qwen2) {
      c = config_with("architectures", R"(["Qwen2ForCausalLM"])", config_with("model_type", "\"qwen2\"", c));
      c = config_with("rope_theta", "1000000.0", config_with("attention_bias", "false,\n  \"use_sliding_window\": false", c));
    }
    return c;
  }
  void write_dir(const std::string& dir, const std::string& dtype, int shards = 1) const {
    HfWeights::write_dir(dir, dtype, shards, config());
  }

  // The same weights set into a pptrain model, q, k and v stacked into qkv.
  void set_into(ParamStore& params) const {
    auto set = [&](const std::string& name, const std::vector<float>& v) {
      Param* p = params.find(name);
      ASSERT_NE(p, nullptr) << name;
      ASSERT_EQ(p->numel(), v.size()) << name;
      p->set_masters(v.data());
    };
    set("wte.weight", w.at("model.embed_tokens.weight"));
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string hf = "model.layers." + std::to_string(l) + ".", h = "h." + std::to_string(l) + ".";
      std::vector<float> qkv, bias;
      for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
        const std::vector<float>& v = w.at(hf + "self_attn." + part + ".weight");
        qkv.insert(qkv.end(), v.begin(), v.end());
        if (m.qkv_bias()) {
          const std::vector<float>& b = w.at(hf + "self_attn." + part + ".bias");
          bias.insert(bias.end(), b.begin(), b.end());
        }
      }
      if (m.qkv_bias()) set(h + "attn.qkv.bias", bias);
      if (m.qk_norm()) {
        set(h + "attn.q_norm.weight", w.at(hf + "self_attn.q_norm.weight"));
        set(h + "attn.k_norm.weight", w.at(hf + "self_attn.k_norm.weight"));
      }
      set(h + "ln_1.weight", w.at(hf + "input_layernorm.weight"));
      set(h + "attn.qkv.weight", qkv);
      set(h + "attn.proj.weight", w.at(hf + "self_attn.o_proj.weight"));
      set(h + "ln_2.weight", w.at(hf + "post_attention_layernorm.weight"));
      set(h + "mlp.gate.weight", w.at(hf + "mlp.gate_proj.weight"));
      set(h + "mlp.up.weight", w.at(hf + "mlp.up_proj.weight"));
      set(h + "mlp.down.weight", w.at(hf + "mlp.down_proj.weight"));
    }
    set("ln_f.weight", w.at("model.norm.weight"));
    if (!m.tie_embeddings) set("lm_head.weight", w.at("lm_head.weight"));
  }

  // Mean cross-entropy in double, from transformers' modeling_llama.py: LlamaRMSNorm
  // weight · x / sqrt(mean(x²) + eps); nn.Linear y = x Wᵀ with W [out, in], no bias;
  // q, k, v viewed [T, heads, HD]; apply_rotary_pos_emb x·cos + rotate_half(x)·sin with
  // rotate_half(x) = cat(-x[HD/2:], x[:HD/2]) and cos, sin of position · inv_freq
  // (inv_freq[i] = theta^(-2i/HD), repeated over both halves), positions 0..T-1;
  // repeat_kv: query head h reads key/value head h / (NH/NKV); causal softmax of
  // q·k / sqrt(HD); down(silu(gate(x)) · up(x)); logits from lm_head, or embed_tokens when
  // tied. The other classes: head_dim in place of C/NH; Qwen2's q, k, v biases (x Wᵀ + b);
  // Qwen3's Qwen3RMSNorm of each q and k head (weight · x / sqrt(mean(x²) + eps) over HD)
  // between the projection and the rotary embedding;
  // rope scaling from modeling_rope_utils.py (linear: inv_freq / factor; llama3: by the
  // wavelength 2π/inv_freq against original / low_freq_factor and original /
  // high_freq_factor, interpolated between), here in double.
  double reference_loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const {
    const int T = m.seq_len, C = m.d_model, NH = m.n_head, NKV = m.n_kv_head, F = m.ffn_hidden, V = m.vocab_size;
    const int HD = m.attention_head_dim(), half = HD / 2, n_rep = NH / NKV;
    std::vector<double> inv_freq(half);
    for (int i = 0; i < half; ++i) {
      double f = std::pow(m.rope_theta, -2.0 * i / HD);
      const RopeScaling& r = m.rope_scaling;
      if (r.type == "linear") f /= r.factor;
      if (r.type == "llama3") {
        const double wavelen = 2 * M_PI / f, low = r.original_max_positions / r.low_freq_factor;
        const double high = r.original_max_positions / r.high_freq_factor;
        const double s = (r.original_max_positions / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = wavelen < high ? f : wavelen > low ? f / r.factor : (1 - s) * f / r.factor + s * f;
      }
      inv_freq[i] = f;
    }
    using Mat = std::vector<std::vector<double>>;
    auto W = [&](const std::string& n) { return w.at(n).data(); };
    auto rmsnorm = [&](const Mat& x, const float* g) {
      Mat y(T, std::vector<double>(C));
      for (int t = 0; t < T; ++t) {
        double mean_sq = 0;
        for (int c = 0; c < C; ++c) mean_sq += x[t][c] * x[t][c] / C;
        for (int c = 0; c < C; ++c) y[t][c] = g[c] * (x[t][c] / std::sqrt(mean_sq + m.norm_eps));
      }
      return y;
    };
    auto linear = [&](const Mat& x, const float* wt, int in, int out, const float* bias = nullptr) {
      Mat y(T, std::vector<double>(out));
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          double s = bias ? bias[o] : 0;
          for (int i = 0; i < in; ++i) s += x[t][i] * double(wt[size_t(o) * in + i]);
          y[t][o] = s;
        }
      return y;
    };
    auto rope = [&](Mat& x, int heads) {
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h) {
          double* head = x[t].data() + h * HD;
          std::vector<double> rotated(HD);
          for (int d = 0; d < HD; ++d) {
            const double angle = t * inv_freq[d % half];
            const double rotate_half = d < half ? -head[d + half] : head[d - half];
            rotated[d] = head[d] * std::cos(angle) + rotate_half * std::sin(angle);
          }
          std::copy(rotated.begin(), rotated.end(), head);
        }
    };
    Mat x(T, std::vector<double>(C));
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] = W("model.embed_tokens.weight")[tokens[t] * C + c];
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      const Mat in = rmsnorm(x, W(h + "input_layernorm.weight"));
      auto B = [&](const char* part) { return m.qkv_bias() ? W(h + "self_attn." + part + ".bias") : nullptr; };
      Mat q = linear(in, W(h + "self_attn.q_proj.weight"), C, NH * HD, B("q_proj"));
      Mat k = linear(in, W(h + "self_attn.k_proj.weight"), C, NKV * HD, B("k_proj"));
      const Mat v = linear(in, W(h + "self_attn.v_proj.weight"), C, NKV * HD, B("v_proj"));
      if (m.qk_norm()) {
        auto head_norm = [&](Mat& x, int heads, const float* g) {
          for (int t = 0; t < T; ++t)
            for (int hh = 0; hh < heads; ++hh) {
              double* head = x[t].data() + hh * HD;
              double mean_sq = 0;
              for (int d = 0; d < HD; ++d) mean_sq += head[d] * head[d] / HD;
              for (int d = 0; d < HD; ++d) head[d] = g[d] * (head[d] / std::sqrt(mean_sq + m.norm_eps));
            }
        };
        head_norm(q, NH, W(h + "self_attn.q_norm.weight"));
        head_norm(k, NKV, W(h + "self_attn.k_norm.weight"));
      }
      rope(q, NH);
      rope(k, NKV);
      Mat att(T, std::vector<double>(NH * HD));
      for (int head = 0; head < NH; ++head) {
        const int kv = head / n_rep;
        for (int t = 0; t < T; ++t) {
          std::vector<double> p(t + 1);
          double mx = -1e300, sum = 0;
          for (int u = 0; u <= t; ++u) {
            double s = 0;
            for (int d = 0; d < HD; ++d) s += q[t][head * HD + d] * k[u][kv * HD + d];
            mx = std::max(mx, p[u] = s / std::sqrt(double(HD)));
          }
          for (int u = 0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
          for (int d = 0; d < HD; ++d) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += p[u] / sum * v[u][kv * HD + d];
            att[t][head * HD + d] = o;
          }
        }
      }
      const Mat o = linear(att, W(h + "self_attn.o_proj.weight"), NH * HD, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += o[t][c];
      const Mat post = rmsnorm(x, W(h + "post_attention_layernorm.weight"));
      Mat gate = linear(post, W(h + "mlp.gate_proj.weight"), C, F);
      const Mat up = linear(post, W(h + "mlp.up_proj.weight"), C, F);
      for (int t = 0; t < T; ++t)
        for (int f = 0; f < F; ++f) gate[t][f] = gate[t][f] / (1 + std::exp(-gate[t][f])) * up[t][f];
      const Mat down = linear(gate, W(h + "mlp.down_proj.weight"), F, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += down[t][c];
    }
    const Mat y = rmsnorm(x, W("model.norm.weight"));
    const float* head = W(m.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    double loss = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<double> logits(V, 0.0);
      for (int v = 0; v < V; ++v)
        for (int c = 0; c < C; ++c) logits[v] += y[t][c] * head[v * C + c];
      double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (double z : logits) sum += std::exp(z - mx);
      loss += std::log(sum) + mx - logits[targets[t]];
    }
    return loss / T;
  }
};

}  // namespace pptrain::testing
