// Time side of the performance model: the ops one training step calls (pp = 1, tp = 1), as
// the layers call them (model/block.cpp, llama_block.cpp, embedding.cpp, head.cpp; the
// trainer's zero, gradient norm and AdamW), each with the FLOPs and bytes
// backend/op_costs.cpp assigns the call: the numbers `logging.op_profile` reports for it,
// so a measured profile and this table compare op by op (tests/test_gpu_model.cpp runs a
// real step and checks the list, call for call). Each line's time is its roofline at the
// stated fractions, or, calibrated, its roofline over the efficiency its op measured.
// Units: N = B·T rows, C = d_model, H the MLP width, V the (padded) vocabulary, Q the qkv
// width (3C for GPT-2), A = NH·HD the attention width.
#include <algorithm>

#include "../model_flops.h"
#include "backend/profiled_ops.h"
#include "core/error.h"
#include "core/rotary.h"
#include "perf_model.h"

namespace pptrain::bench {

DeviceSpec device_spec(const std::string& name) {
  // NVIDIA data sheets, dense (no sparsity); SXM parts. Memory as a job may fill it: 80 GB
  // (10^9 bytes, below the 80 GiB of the part, so "fits" is conservative), 141 GB on H200.
  if (name == "h100") return {"H100 SXM", 989e12, 67e12, 3.35e12, 80e9};
  if (name == "h200") return {"H200 SXM", 989e12, 67e12, 4.8e12, 141e9};
  if (name == "a100") return {"A100 80GB SXM", 312e12, 19.5e12, 2.04e12, 80e9};
  fail("--device: '", name, "' is not one of h100, h200, a100");
}

namespace {

// How a line's time is stated without a calibration: which fraction of which peak.
enum class Kind { gemm, fused_attention, naive_attention, memory };

// The op table being built: one OpLine per line name, each call's time its roofline; each
// call's time also goes to the layer kind and pass being costed (at(): the part of the step
// a partitioner plans with).
class StepCosts {
 public:
  StepCosts(const DeviceSpec& dev, const Fractions& f, const Calibration* cal, size_t elem)
      : dev_(dev), f_(f), cal_(cal), elem_(elem) {}

  // `times` calls of backend op `op`, each costing `cost` (op_costs::op of the call's
  // arguments). `min_dim`: a GEMM's smallest dimension (thin ones get the small fraction).
  // `hidden_bytes`: traffic of the op's kernels beyond its tensors (intermediates that go
  // through HBM), in its time but not in its bytes (the profile counts the tensors).
  void add(const std::string& name, const char* op, double times, OpCost cost, Kind kind, double min_dim = 0,
           double hidden_bytes = 0) {
    const double peak = matmul_peak();
    const double roof_s = std::max(cost.flops / peak, (cost.bytes + hidden_bytes) / dev_.hbm_bytes_per_s);
    double fraction = f_.hbm;
    if (kind == Kind::gemm) fraction = min_dim < f_.small_gemm_dim ? f_.gemm_small : f_.gemm_large;
    if (kind == Kind::fused_attention) fraction = f_.flash;
    if (kind == Kind::naive_attention) fraction = f_.gemm_small;
    const double compute_s = cost.flops / (peak * (kind == Kind::memory ? 1.0 : fraction));
    const double memory_s = (cost.bytes + hidden_bytes) / (dev_.hbm_bytes_per_s * f_.hbm);
    double seconds = std::max(compute_s, memory_s);
    if (cal_) {
      auto it = cal_->efficiency.find(op);
      if (it != cal_->efficiency.end()) seconds = roof_s / it->second;
    }
    auto line = std::find_if(ops.begin(), ops.end(), [&](const OpLine& o) { return o.name == name; });
    if (line == ops.end()) line = ops.insert(ops.end(), OpLine{name, op});
    PPTRAIN_CHECK(line->op == op, "perf model: line '", name, "' names two ops");
    line->count += int(times);
    line->flops += times * cost.flops;
    line->bytes += times * cost.bytes;
    line->ms += times * 1e3 * seconds;
    line->roofline_ms += times * 1e3 * roof_s;
    line->compute_bound = line->compute_bound || compute_s > memory_s;
    *part_ += times * 1e3 * seconds;
  }

  // Where the calls that follow belong: a pass of a layer kind, or the per-step update.
  void at(double& part) { part_ = &part; }

  std::vector<OpLine> ops;
  double update_ms = 0;

 private:
  // bf16 GEMMs run on the tensor cores; fp32 ones do not (the backend turns TF32 off).
  double matmul_peak() const { return elem_ == 2 ? dev_.bf16_flops : dev_.fp32_flops; }

  DeviceSpec dev_;
  Fractions f_;
  const Calibration* cal_;
  size_t elem_;
  double* part_ = &update_ms;
};

// Stand-ins for the ops' arguments: op_costs reads a view's dtype and whether an optional
// tensor is there, never the memory, so every tensor is one dummy address of the right type.
struct Args {
  explicit Args(bool bf16) : bf16(bf16) {}
  bool bf16;
  float f32 = 0;
  bfloat16 b16{};
  View act() { return bf16 ? View(&b16) : View(&f32); }  // an activation (storage type)
  float* stats() { return &f32; }                        // fp32 row statistics, gradients
  const int32_t* ids() { return nullptr; }
};

// The linear ops of one call each: y[n,out] = x[n,in]·wᵀ and its passes.
struct Linear {
  StepCosts& s;
  Args& a;
  double times;
  void forward(const std::string& name, int n, int in, int out, bool bias) {
    s.add(name, "linear_forward", times,
          op_costs::linear_forward(a.act(), a.act(), a.act(), bias ? ConstView(a.act()) : nullptr, n, in, out),
          Kind::gemm, std::min({n, in, out}));
  }
  // y = x·wᵀ (+ b) + residual in one call (tp = 1: the GEMM reads the residual as its C)
  void forward_residual(const std::string& name, int n, int in, int out, bool bias) {
    s.add(name, "linear_forward_residual", times,
          op_costs::linear_forward_residual(a.act(), a.act(), a.act(), bias ? ConstView(a.act()) : nullptr, a.act(), n,
                                            in, out),
          Kind::gemm, std::min({n, in, out}));
  }
  void dgrad(const std::string& name, int n, int in, int out, bool accumulate = false) {
    s.add(name, "linear_backward_input", times,
          op_costs::linear_backward_input(a.act(), a.act(), a.act(), n, in, out, accumulate), Kind::gemm,
          std::min({n, in, out}));
  }
  void wgrad(const std::string& name, int n, int in, int out, bool bias) {
    s.add(name, "linear_backward_weight", times,
          op_costs::linear_backward_weight(a.stats(), bias ? a.stats() : nullptr, a.act(), a.act(), n, in, out),
          Kind::gemm, std::min({n, in, out}));
  }
};

// The attention core of one call, forward and backward, per model.attention (GQA for Llama).
void attention_ops(StepCosts& s, Args& a, const ModelDims& d, const std::string& kind, double times, bool gqa,
                   bool backward) {
  const int b = d.batch, t = d.seq_len, nh = d.local_heads(), kv = d.local_kv_heads(), hd = d.head_dim();
  const std::string tag = " (" + kind + ")";
  const bool fused = kind != "naive";
  const Kind k = fused ? Kind::fused_attention : Kind::naive_attention;
  // The naive kernels' [B,NH,T,T] matrices beyond the one the op keeps (the probabilities):
  // forward the scores written, read and rewritten by the softmax, the probabilities read by
  // P·V (3 more); backward dP written, dP and P read, dS written, dS read twice, P read by dV
  // (6 more, the kept P counted once by the op).
  const double square = double(b) * nh * t * t * (a.bf16 ? 2 : 4);
  const double hidden = fused ? 0 : (backward ? 6 : 3) * square;
  if (!backward) {
    if (gqa)
      s.add("attention forward" + tag, fused ? "gqa_flash_attention_forward" : "gqa_attention_forward", times,
            fused ? op_costs::gqa_flash_attention_forward(a.act(), a.stats(), a.act(), b, t, nh, kv, hd)
                  : op_costs::gqa_attention_forward(a.act(), a.act(), a.act(), b, t, nh, kv, hd),
            k, 0, hidden);
    else
      s.add("attention forward" + tag, fused ? "flash_attention_forward" : "attention_forward", times,
            fused ? op_costs::flash_attention_forward(a.act(), a.stats(), a.act(), b, t, nh, hd)
                  : op_costs::attention_forward(a.act(), a.act(), a.act(), b, t, nh, hd),
            k, 0, hidden);
    return;
  }
  if (gqa)
    s.add("attention backward" + tag, fused ? "gqa_flash_attention_backward_input" : "gqa_attention_backward_input",
          times,
          fused ? op_costs::gqa_flash_attention_backward_input(a.act(), a.stats(), a.act(), a.act(), a.act(),
                                                               a.stats(), b, t, nh, kv, hd)
                : op_costs::gqa_attention_backward_input(a.act(), a.act(), a.act(), a.act(), b, t, nh, kv, hd),
          k, 0, hidden);
  else
    s.add("attention backward" + tag, fused ? "flash_attention_backward_input" : "attention_backward_input", times,
          fused ? op_costs::flash_attention_backward_input(a.act(), a.stats(), a.act(), a.act(), a.act(), a.stats(),
                                                           b, t, nh, hd)
                : op_costs::attention_backward_input(a.act(), a.act(), a.act(), a.act(), b, t, nh, hd),
          k, 0, hidden);
}

// GPT-2's Block (model/block.cpp), `times` calls of each pass; `forward_again`: the
// forward's ops that full recompute re-runs at the start of I (all but the MLP's last
// projection and the residual after it).
void gpt2_block(StepCosts& s, Args& a, const ModelDims& d, const std::string& attention, double times,
                bool forward_again, PassTimes& block) {
  const int n = d.rows(), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  Linear lin{s, a, times};
  auto forward_ops = [&](double k, const std::string& suffix) {
    Linear l{s, a, k};
    s.add("layernorm forward (ln_1)" + suffix, "layernorm_forward", k,
          op_costs::layernorm_forward(a.act(), a.stats(), a.stats(), a.act(), a.act(), a.act(), n, c), Kind::memory);
    l.forward("qkv forward (+bias epilogue)" + suffix, n, c, 3 * cl, true);
    attention_ops(s, a, d, attention, k, false, false);
    l.forward("attn proj forward" + suffix, n, cl, c, false);
    // x2 = proj + bias + x and ln_2(x2) in one pass
    s.add("residual + bias + layernorm forward (ln_2)" + suffix, "residual_layernorm_forward", k,
          op_costs::residual_layernorm_forward(a.act(), a.act(), a.stats(), a.stats(), a.act(), a.act(), a.act(),
                                               a.act(), a.act(), n, c),
          Kind::memory);
    s.add("fc1 forward (+bias+GELU epilogue, aux out)" + suffix, "linear_gelu_forward", k,
          op_costs::linear_gelu_forward(a.act(), a.act(), a.act(), a.act(), a.act(), n, c, hl), Kind::gemm,
          std::min({n, c, hl}));
  };
  s.at(block.f);
  forward_ops(times, "");
  lin.forward_residual("fc2 forward (+bias epilogue, + residual)", n, hl, c, true);
  s.at(block.i);  // full recompute re-runs the forward at the start of I
  if (forward_again) forward_ops(times, " (recompute)");

  s.add("fc2 dgrad (+DGELU epilogue)", "linear_backward_input_dgelu", times,
        op_costs::linear_backward_input_dgelu(a.act(), a.act(), a.act(), a.act(), n, hl, c), Kind::gemm,
        std::min({n, hl, c}));
  lin.dgrad("fc1 dgrad", n, c, hl);
  // dx = residual + LN'(dy): the residual gradient joins in the layernorm dgrad
  s.add("layernorm dgrad (+ residual)", "layernorm_backward_input", 2 * times,
        op_costs::layernorm_backward_input(a.act(), a.act(), a.act(), a.stats(), a.stats(), a.act(), n, c, a.act()),
        Kind::memory);
  lin.dgrad("attn proj dgrad", n, cl, c);
  attention_ops(s, a, d, attention, times, false, true);
  lin.dgrad("qkv dgrad", n, c, 3 * cl);

  // W: fp32 gradients accumulated in place; bias gradients from the GEMMs' epilogue
  s.at(block.w);
  lin.wgrad("fc2 wgrad (+bias grad)", n, hl, c, true);
  lin.wgrad("fc1 wgrad (+bias grad)", n, c, hl, true);
  lin.wgrad("attn proj wgrad (+bias grad)", n, cl, c, true);
  lin.wgrad("qkv wgrad (+bias grad)", n, c, 3 * cl, true);
  s.add("layernorm wgrad (dgamma, dbeta)", "layernorm_backward_weight", 2 * times,
        op_costs::layernorm_backward_weight(a.stats(), a.stats(), a.act(), a.act(), a.stats(), a.stats(), n, c),
        Kind::memory);
}

// The Llama family's block (model/llama_block.cpp).
void llama_block(StepCosts& s, Args& a, const ModelDims& d, const std::string& attention, double times,
                 bool forward_again, const RotaryFrequencies& rope, PassTimes& block) {
  const int n = d.rows(), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden(), ql = d.local_qkv();
  const int b = d.batch, t = d.seq_len, nh = d.local_heads(), kv = d.local_kv_heads(), hd = d.head_dim();
  Linear lin{s, a, times};
  // q_norm/k_norm (qwen3): the heads copied out as rows of HD, normed, copied back
  auto qk_norm = [&](double k, bool backward, const std::string& suffix) {
    const std::string pass = backward ? "dgrad" : "forward";
    s.add("q/k norm copies " + pass + suffix, "copy_columns", 2 * k,
          op_costs::copy_columns(a.act(), a.act(), n, nh * hd, nh * hd, ql), Kind::memory);
    s.add("q/k norm copies " + pass + suffix, "copy_columns", 2 * k,
          op_costs::copy_columns(a.act(), a.act(), n, kv * hd, kv * hd, ql), Kind::memory);
    for (int rows : {n * nh, n * kv}) {
      if (backward)
        s.add("q/k norm dgrad" + suffix, "rmsnorm_backward_input", k,
              op_costs::rmsnorm_backward_input(a.act(), a.act(), a.act(), a.stats(), a.act(), rows, hd, nullptr),
              Kind::memory);
      else
        s.add("q/k norm forward" + suffix, "rmsnorm_forward", k,
              op_costs::rmsnorm_forward(a.act(), a.stats(), a.act(), a.act(), rows, hd, d.norm_eps), Kind::memory);
    }
  };
  auto forward_ops = [&](double k, const std::string& suffix) {
    Linear l{s, a, k};
    s.add("rmsnorm forward (attention norm)" + suffix, "rmsnorm_forward", k,
          op_costs::rmsnorm_forward(a.act(), a.stats(), a.act(), a.act(), n, c, d.norm_eps), Kind::memory);
    l.forward(std::string(d.qkv_bias ? "qkv forward (+bias epilogue)" : "qkv forward") + suffix, n, c, ql,
              d.qkv_bias);
    if (d.qk_norm) qk_norm(k, false, suffix);
    s.add("rotary forward" + suffix, "rotary_forward", k, op_costs::rotary_forward(a.act(), b, t, nh, kv, hd, rope),
          Kind::memory);
    attention_ops(s, a, d, attention, k, true, false);
    l.forward_residual("o_proj forward (+ residual)" + suffix, n, cl, c, false);
    s.add("rmsnorm forward (ffn norm)" + suffix, "rmsnorm_forward", k,
          op_costs::rmsnorm_forward(a.act(), a.stats(), a.act(), a.act(), n, c, d.norm_eps), Kind::memory);
    l.forward("gate, up forward" + suffix, n, c, hl, false);
    l.forward("gate, up forward" + suffix, n, c, hl, false);
    s.add("swiglu forward" + suffix, "swiglu_forward", k,
          op_costs::swiglu_forward(a.act(), a.act(), a.act(), size_t(n) * hl), Kind::memory);
  };
  s.at(block.f);
  forward_ops(times, "");
  lin.forward_residual("down forward (+ residual)", n, hl, c, false);
  s.at(block.i);
  if (forward_again) forward_ops(times, " (recompute)");

  lin.dgrad("down dgrad", n, hl, c);
  s.add("swiglu dgrad", "swiglu_backward_input", times,
        op_costs::swiglu_backward_input(a.act(), a.act(), a.act(), a.act(), a.act(), size_t(n) * hl), Kind::memory);
  lin.dgrad("gate, up dgrad", n, c, hl, false);
  lin.dgrad("gate, up dgrad", n, c, hl, true);  // up's adds into gate's
  s.add("rmsnorm dgrad (+ residual)", "rmsnorm_backward_input", 2 * times,
        op_costs::rmsnorm_backward_input(a.act(), a.act(), a.act(), a.stats(), a.act(), n, c, a.act()), Kind::memory);
  lin.dgrad("o_proj dgrad", n, cl, c);
  attention_ops(s, a, d, attention, times, true, true);
  s.add("rotary dgrad", "rotary_backward_input", times,
        op_costs::rotary_backward_input(a.act(), b, t, nh, kv, hd, rope), Kind::memory);
  if (d.qk_norm) qk_norm(times, true, "");
  lin.dgrad("qkv dgrad", n, c, ql);

  s.at(block.w);
  lin.wgrad("down wgrad", n, hl, c, false);
  lin.wgrad("gate, up wgrad", n, c, hl, false);
  lin.wgrad("gate, up wgrad", n, c, hl, false);
  lin.wgrad("o_proj wgrad", n, cl, c, false);
  lin.wgrad(d.qkv_bias ? "qkv wgrad (+bias grad)" : "qkv wgrad", n, c, ql, d.qkv_bias);
  s.add("rmsnorm wgrad", "rmsnorm_backward_weight", 2 * times,
        op_costs::rmsnorm_backward_weight(a.stats(), a.act(), a.act(), a.stats(), n, c), Kind::memory);
  if (d.qk_norm)
    for (int rows : {n * nh, n * kv})
      s.add("q/k norm wgrad", "rmsnorm_backward_weight", times,
            op_costs::rmsnorm_backward_weight(a.stats(), a.act(), a.act(), a.stats(), rows, hd), Kind::memory);
}

}  // namespace

double step_parameters(const ModelConfig& m) {
  return double(model_param_counts(m).total);  // tp = 1: the vocabulary needs no padding
}

StepPrediction predict_step(const Config& cfg, const DeviceSpec& dev, const Fractions& f, const Calibration* cal) {
  const size_t elem = cfg.precision() == Precision::bf16 ? 2 : 4;
  const ModelDims d = ModelDims::from(cfg.model, cfg.training.micro_batch_size, 1, 0);
  const double mb = cfg.parallel.microbatches, L = d.n_layer;
  const int n = d.rows(), c = d.d_model, t = d.seq_len, v = d.local_vocab(), valid = d.valid_vocab();
  const std::string& attention = cfg.model.attention;
  if (attention != "naive" && attention != "flash" && attention != "cudnn")
    fail("perf model: model.attention '", attention, "' is not one of naive, flash, cudnn");
  const std::string recompute = ModelDims::recompute_name_of(cfg, 0);
  if (recompute == "attention")
    fail("perf model: training.recompute: attention with naive attention is not modelled (none or full are)");
  const bool again = recompute == "full";
  StepCosts s(dev, f, cal, elem);
  Args a(elem == 2);
  Linear head{s, a, mb};
  StepPrediction r;

  // embedding (F) and its W
  s.at(r.embedding.f);
  s.add("embedding forward", "embedding_forward", mb,
        op_costs::embedding_forward(a.act(), a.ids(), a.act(), d.llama ? nullptr : ConstView(a.act()), n, t, c, 0, v),
        Kind::memory);
  if (d.llama)
    llama_block(s, a, d, attention, mb * L, again, rotary_frequencies(cfg.model), r.block);
  else
    gpt2_block(s, a, d, attention, mb * L, again, r.block);
  // head: final norm, logits, the fused cross-entropy (tp = 1: statistics and dlogits in
  // one pass over the logits), the loss sum; I and W
  s.at(r.head.f);
  if (d.llama)
    s.add("final norm forward", "rmsnorm_forward", mb,
          op_costs::rmsnorm_forward(a.act(), a.stats(), a.act(), a.act(), n, c, d.norm_eps), Kind::memory);
  else
    s.add("final norm forward", "layernorm_forward", mb,
          op_costs::layernorm_forward(a.act(), a.stats(), a.stats(), a.act(), a.act(), a.act(), n, c), Kind::memory);
  head.forward("lm head forward", n, c, v, false);
  s.add("cross-entropy (fused: statistics and dlogits)", "ce_fused", mb,
        op_costs::ce_fused(a.act(), a.stats(), a.stats(), a.stats(), a.act(), a.ids(), n, v, valid, 1.0f),
        Kind::memory);
  s.add("cross-entropy loss sum", "ce_loss_sum", mb, op_costs::ce_loss_sum(nullptr, a.stats(), a.stats(), a.stats(), n),
        Kind::memory);
  s.at(r.head.i);
  head.dgrad("lm head dgrad", n, c, v);
  if (d.llama)
    s.add("final norm dgrad", "rmsnorm_backward_input", mb,
          op_costs::rmsnorm_backward_input(a.act(), a.act(), a.act(), a.stats(), a.act(), n, c, nullptr), Kind::memory);
  else
    s.add("final norm dgrad", "layernorm_backward_input", mb,
          op_costs::layernorm_backward_input(a.act(), a.act(), a.act(), a.stats(), a.stats(), a.act(), n, c, nullptr),
          Kind::memory);
  s.at(r.head.w);
  head.wgrad("lm head wgrad", n, c, v, false);
  if (d.llama)
    s.add("final norm wgrad", "rmsnorm_backward_weight", mb,
          op_costs::rmsnorm_backward_weight(a.stats(), a.act(), a.act(), a.stats(), n, c), Kind::memory);
  else
    s.add("final norm wgrad", "layernorm_backward_weight", mb,
          op_costs::layernorm_backward_weight(a.stats(), a.stats(), a.act(), a.act(), a.stats(), a.stats(), n, c),
          Kind::memory);
  s.at(r.embedding.w);
  s.add("embedding wgrad (scatter-add)", "embedding_backward_weight", mb,
        op_costs::embedding_backward_weight(a.stats(), d.llama ? nullptr : a.stats(), a.act(), a.ids(), n, t, c, 0, v),
        Kind::memory);
  // every microbatch's tokens and targets to the device in one copy (with the embedding's
  // forward)
  s.at(r.embedding.f);
  s.add("tokens and targets to the device", "copy_to_device", 1, OpCost{0, 2 * 4.0 * n * mb}, Kind::memory);

  // per step, over every parameter P: zero the gradients, their norm (one reduction over the
  // flat arena), AdamW (param, grad, m, v in; param, m, v out, fp32; + the bf16 working copy)
  const double p = step_parameters(cfg.model);
  s.at(s.update_ms);
  s.add("the microbatches' losses to the host", "copy_to_host", 1, OpCost{0, 8.0 * mb}, Kind::memory);
  s.add("zero gradients", "zero", 1, OpCost{0, 4 * p}, Kind::memory);
  s.add("gradient norm (sum of squares)", "sum_squares", 1, op_costs::sum_squares(a.stats(), size_t(p)), Kind::memory);
  AdamwTensor all{a.stats(), a.stats(), a.stats(), elem == 2 ? a.act() : View(nullptr),
                  a.stats(), a.stats(), a.stats(), a.stats(), size_t(p), 0.0f};
  s.add(elem == 2 ? "adamw (+ clip factor, + bf16 copy)" : "adamw (+ clip factor)", "adamw_multi", 1,
        op_costs::adamw_multi({all}, 1, 0, 0, 0, 0, 1), Kind::memory);

  r.ops = std::move(s.ops);
  for (const OpLine& o : r.ops) r.step_ms += o.ms;
  // The passes per microbatch (the blocks' per block), as a profile states them.
  for (PassTimes* t : {&r.embedding, &r.head}) t->f /= mb, t->i /= mb, t->w /= mb;
  r.block.f /= mb * L, r.block.i /= mb * L, r.block.w /= mb * L;
  r.update_ms = s.update_ms;
  r.tokens_per_step = double(cfg.training.micro_batch_size) * mb * d.seq_len;
  r.tokens_per_s = r.tokens_per_step / (r.step_ms / 1e3);
  r.flops_per_token = model_flops_per_token(cfg.model);
  r.mfu = r.tokens_per_s * r.flops_per_token / dev.bf16_flops;
  r.memory = memory_breakdown(cfg, p, d, elem);
  return r;
}

std::vector<std::string> assumptions(const Config& cfg, const Fractions& f, const Calibration* cal) {
  auto pct = [](double x) { return std::to_string(int(x * 100 + 0.5)) + "%"; };
  std::vector<std::string> out = {
      "view: pp=1 tp=1 (the whole model on one device), one step = micro_batch_size x microbatches sequences",
      "ops: those the layers, the head and the optimizer call in one step, with the FLOPs and bytes "
      "logging.op_profile counts for each call (backend/op_costs.cpp)",
      "time per op = max(FLOPs / (peak x fraction), bytes / (HBM x fraction)): a roofline per call",
      "GEMMs with every dimension >= " + std::to_string(f.small_gemm_dim) + ": " + pct(f.gemm_large) +
          " of the matmul peak; thinner GEMMs and the naive attention's products: " + pct(f.gemm_small),
      "matmul peak: dense bf16 tensor cores in bf16; fp32 without tensor cores in fp32 (TF32 off)",
      "fused attention (flash, cudnn): " + pct(f.flash) + " of the matmul peak, causal half of T^2, backward 2.5x forward",
      "memory-bound kernels: " + pct(f.hbm) + " of HBM bandwidth, minimum bytes read + written",
      "attention: " + cfg.model.attention + "; MFU against the dense bf16 peak with 6N + 6LTA FLOPs per token",
  };
  if (cal) {
    std::string ops;
    for (const auto& [op, e] : cal->efficiency) ops += (ops.empty() ? "" : ", ") + op + " " + pct(e);
    out.push_back("calibrated from " + cal->source + ": each op's time = its roofline / its measured efficiency (" +
                  ops + "); the fractions above apply to ops it did not measure");
  }
  return out;
}

}  // namespace pptrain::bench
