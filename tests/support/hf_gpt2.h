// A tiny GPT-2 (GPT2LMHeadModel, tiny_model()'s shapes) in Hugging Face's layout, for the
// GPT-2 interop tests: its config.json, random weights under HF's names (Conv1D weights
// [in, out]) written as a model directory, the same weights set into a pptrain model, and
// the mean loss computed in double straight from HF's layout.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "model/param.h"
#include "support/hf_files.h"
#include "support/single_rank_model.h"

namespace pptrain::testing {

inline constexpr const char* kConfigJson = R"({
  "_name_or_path": "tiny-gpt2",
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
  "bos_token_id": 10, "eos_token_id": 10,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 5, "n_embd": 8, "n_head": 2, "n_inner": null, "n_layer": 2, "n_positions": 5,
  "reorder_and_upcast_attn": false, "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
  "summary_activation": null, "summary_first_dropout": 0.1, "summary_type": "cls_index",
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "torch_dtype": "float32", "transformers_version": "4.40.0", "use_cache": true,
  "vocab_size": 11
})";

// A key of kConfigJson with another value.
inline std::string gpt2_config_with(const std::string& key, const std::string& value) {
  return config_with(key, value, kConfigJson);
}

struct HfGpt2 : HfWeights {
  ModelConfig m = tiny_model();  // L 2, NH 2, C 8, T 5, V 11

  // Random weights; with `bf16` already rounded to bf16, so a BF16 file holds them exactly.
  HfGpt2(uint32_t seed, bool bf16) {
    const int64_t C = m.d_model, V = m.vocab_size, T = m.seq_len;
    order = {{"transformer.wte.weight", {V, C}}, {"transformer.wpe.weight", {T, C}}};
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      for (auto [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
               {"ln_1.weight", {C}}, {"ln_1.bias", {C}}, {"attn.c_attn.weight", {C, 3 * C}},
               {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
               {"ln_2.weight", {C}}, {"ln_2.bias", {C}}, {"mlp.c_fc.weight", {C, 4 * C}}, {"mlp.c_fc.bias", {4 * C}},
               {"mlp.c_proj.weight", {4 * C, C}}, {"mlp.c_proj.bias", {C}}})
        order.push_back({h + name, shape});
    }
    order.push_back({"transformer.ln_f.weight", {C}});
    order.push_back({"transformer.ln_f.bias", {C}});
    randomise(seed, bf16,
              [](const std::string& name) { return name.find("ln_") != std::string::npos && name.ends_with(".weight"); });
  }

  void write_dir(const std::string& dir, const std::string& dtype, int shards = 1,
                 const std::string& config = kConfigJson) const {
    HfWeights::write_dir(dir, dtype, shards, config);
  }

  // The same weights set into a pptrain model: Conv1D weights [in, out] transposed to [out, in].
  void set_into(ParamStore& params) const {
    auto pptrain_name = [](std::string hf) {
      hf = hf.substr(std::string("transformer.").size());
      for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"c_attn", "qkv"}, {"attn.c_proj", "attn.proj"}, {"c_fc", "fc"}, {"mlp.c_proj", "mlp.proj"}}) {
        const size_t at = hf.find(from);
        if (at != std::string::npos) hf.replace(at, from.size(), to);
      }
      return hf;
    };
    for (const auto& [name, shape] : order) {
      std::vector<float> v = w.at(name);
      const bool conv1d = shape.size() == 2 && name.find(".h.") != std::string::npos;
      if (conv1d) {
        const int64_t in = shape[0], out = shape[1];
        for (int64_t o = 0; o < out; ++o)
          for (int64_t i = 0; i < in; ++i) v[size_t(o * in + i)] = w.at(name)[size_t(i * out + o)];
      }
      Param* p = params.find(pptrain_name(name));
      ASSERT_NE(p, nullptr) << name;
      ASSERT_EQ(p->numel(), v.size()) << name;
      p->set_masters(v.data());
    }
  }

  // Mean cross-entropy in double, straight from HF's layout (modeling_gpt2.py: Conv1D is
  // y = x W + b with W [in, out]; gelu_new; LayerNorm eps 1e-5; lm_head = wte).
  double reference_loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const {
    const int T = m.seq_len, C = m.d_model, NH = m.n_head, V = m.vocab_size, hs = C / NH;
    using Mat = std::vector<std::vector<double>>;
    auto W = [&](const std::string& n) { return w.at("transformer." + n).data(); };
    auto layernorm = [&](const Mat& x, const float* g, const float* b) {
      Mat y(T, std::vector<double>(C));
      for (int t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += x[t][c] / C;
        for (int c = 0; c < C; ++c) var += (x[t][c] - mean) * (x[t][c] - mean) / C;
        for (int c = 0; c < C; ++c) y[t][c] = (x[t][c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c];
      }
      return y;
    };
    auto conv1d = [&](const Mat& x, const float* wt, const float* b, int in, int out) {
      Mat y(T, std::vector<double>(out));
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          double s = b[o];
          for (int i = 0; i < in; ++i) s += x[t][i] * double(wt[size_t(i) * out + o]);
          y[t][o] = s;
        }
      return y;
    };
    Mat x(T, std::vector<double>(C));
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] = double(W("wte.weight")[tokens[t] * C + c]) + W("wpe.weight")[t * C + c];
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      Mat qkv = conv1d(layernorm(x, W(h + "ln_1.weight"), W(h + "ln_1.bias")), W(h + "attn.c_attn.weight"),
                       W(h + "attn.c_attn.bias"), C, 3 * C);
      Mat att(T, std::vector<double>(C));
      for (int head = 0; head < NH; ++head)
        for (int t = 0; t < T; ++t) {
          std::vector<double> p(t + 1);
          double mx = -1e300, sum = 0;
          for (int u = 0; u <= t; ++u) {
            double s = 0;
            for (int d = 0; d < hs; ++d) s += qkv[t][head * hs + d] * qkv[u][C + head * hs + d];
            mx = std::max(mx, p[u] = s / std::sqrt(double(hs)));
          }
          for (int u = 0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
          for (int d = 0; d < hs; ++d) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += p[u] / sum * qkv[u][2 * C + head * hs + d];
            att[t][head * hs + d] = o;
          }
        }
      Mat proj = conv1d(att, W(h + "attn.c_proj.weight"), W(h + "attn.c_proj.bias"), C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += proj[t][c];
      Mat fc = conv1d(layernorm(x, W(h + "ln_2.weight"), W(h + "ln_2.bias")), W(h + "mlp.c_fc.weight"),
                      W(h + "mlp.c_fc.bias"), C, 4 * C);
      for (auto& row : fc)
        for (double& v : row) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      Mat out = conv1d(fc, W(h + "mlp.c_proj.weight"), W(h + "mlp.c_proj.bias"), 4 * C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += out[t][c];
    }
    const Mat y = layernorm(x, W("ln_f.weight"), W("ln_f.bias"));
    double loss = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<double> logits(V, 0.0);
      for (int v = 0; v < V; ++v)
        for (int c = 0; c < C; ++c) logits[v] += y[t][c] * W("wte.weight")[v * C + c];
      double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (double z : logits) sum += std::exp(z - mx);
      loss += std::log(sum) + mx - logits[targets[t]];
    }
    return loss / T;
  }
};

}  // namespace pptrain::testing
