// Time side of the performance model: every kernel of one training step (pp = 1, tp = 1),
// each at the roofline of its FLOPs and bytes. Units: N = B·T rows, C = d_model, H = 4C,
// V = vocabulary (padded), NH heads of HD = C/NH, e = bytes per activation element
// (2 bf16, 4 fp32). "u" below is one [N,C] activation tensor: N·C·e bytes.
#include <algorithm>

#include "../model_flops.h"
#include "core/error.h"
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

// The op table being built: one OpCost per op kind, each op's time its roofline.
class StepCosts {
 public:
  StepCosts(const DeviceSpec& dev, const Fractions& f, size_t elem) : dev_(dev), f_(f), e_(double(elem)) {}

  // `times` launches of a (batched) GEMM C[m,n] = A[m,k]·B[k,n]: reads A and B in the
  // storage type, writes C with `out_bytes` per element (e; 8 for an fp32 gradient
  // accumulated in place: read + write), plus `extra_bytes` (an epilogue's aux input).
  void gemm(const std::string& name, double times, double m, double n, double k, double batch = 1,
            double out_bytes = 0, double extra_bytes = 0) {
    const double flops = 2 * m * n * k * batch;
    const double bytes = batch * ((m * k + k * n) * e_ + m * n * (out_bytes > 0 ? out_bytes : e_)) + extra_bytes;
    const bool small = std::min({m, n, k}) < f_.small_gemm_dim;
    add(name, times, flops, bytes, matmul_peak() * (small ? f_.gemm_small : f_.gemm_large));
  }
  // `times` launches of a fused attention kernel (flash, cuDNN) on the tensor cores.
  void fused_attention(const std::string& name, double times, double flops, double bytes) {
    add(name, times, flops, bytes, matmul_peak() * f_.flash);
  }
  // `times` launches of a memory-bound kernel moving `bytes` (read + written) each.
  void memory(const std::string& name, double times, double bytes) { add(name, times, 0, bytes, 1); }

  std::vector<OpCost> ops;

 private:
  // bf16 GEMMs run on the tensor cores; fp32 ones do not (the backend turns TF32 off).
  double matmul_peak() const { return e_ == 2 ? dev_.bf16_flops : dev_.fp32_flops; }

  void add(const std::string& name, double times, double flops, double bytes, double flops_per_s) {
    const double compute_s = flops / flops_per_s, memory_s = bytes / (dev_.hbm_bytes_per_s * f_.hbm);
    auto it = std::find_if(ops.begin(), ops.end(), [&](const OpCost& o) { return o.name == name; });
    if (it == ops.end()) it = ops.insert(ops.end(), OpCost{name});
    it->count += int(times);
    it->flops += times * flops;
    it->bytes += times * bytes;
    it->ms += times * 1e3 * std::max(compute_s, memory_s);
    it->compute_bound = it->compute_bound || compute_s > memory_s;
  }

  DeviceSpec dev_;
  Fractions f_;
  double e_;
};

// The attention core of one layer and microbatch, forward and backward, per model.attention.
void attention_costs(StepCosts& s, const std::string& kind, const ModelDims& d, double e, double times) {
  const double b = d.batch, t = d.seq_len, hd = d.head_dim(), bh = b * d.n_head, u = double(d.rows()) * d.d_model * e;
  if (kind == "naive") {
    // kernels/attention.cuh: permute, q·kᵀ over the full T×T, causal softmax, probs·v,
    // unpermute; backward the transposes and four GEMMs. The [B,NH,T,T] matrices go
    // through HBM (written by a GEMM, read and written by the softmax).
    const double square = bh * t * t * e;
    s.memory("attention permute/unpermute (naive)", 2 * times, 4 * u);  // qkv→q,k,v (6u) and y→out (2u)
    s.gemm("attention q.kT, dprobs = dy.vT (naive)", 2 * times, t, t, hd, bh);
    s.memory("attention softmax fwd+bwd (naive)", times, 2 * square);   // read scores, write probs
    s.gemm("attention probs.v, dv, dq, dk (naive)", 4 * times, t, hd, t, bh);
    s.memory("attention softmax fwd+bwd (naive)", times, 3 * square);   // read dprobs, probs; write dscores
    s.memory("attention permute/unpermute (naive)", 2 * times, 4 * u);  // backward: dout→dy (2u), dq,dk,dv→dqkv (6u)
    return;
  }
  // flash / cuDNN: the causal half of the T×T products, forward 2 GEMMs of 2·T·T·HD/2 FLOPs
  // per head, backward 2.5× that (recomputing the scores and probabilities from lse);
  // bytes O(T·HD): qkv in, out and lse out; backward qkv, out, dout in, dqkv out, delta.
  const double fwd_flops = 4 * bh * t * t * hd / 2, stats = bh * t * 4;
  const std::string tag = " (" + kind + ")";
  s.fused_attention("attention forward" + tag, times, fwd_flops, 4 * u + stats);
  s.fused_attention("attention backward" + tag, times, 2.5 * fwd_flops, 8 * u + 3 * stats);
}

}  // namespace

StepPrediction predict_step(const Config& cfg, const DeviceSpec& dev, const Fractions& f) {
  const size_t elem = cfg.precision() == Precision::bf16 ? 2 : 4;
  const ModelDims d = ModelDims::from(cfg.model, cfg.training.micro_batch_size, 1, 0);
  const double e = double(elem), mb = cfg.parallel.microbatches, L = d.n_layer;
  const double n = d.rows(), c = d.d_model, h = d.local_hidden(), v = d.padded_vocab();
  const double u = n * c * e, stats = 2 * n * 4;  // one [N,C] tensor; mean and rstd [N] fp32
  StepCosts s(dev, f, elem);

  // ---- forward (per microbatch) ----
  s.memory("embedding forward (wte + wpe gather)", mb, n * 4 + 3 * u);  // ids, two rows read, one written
  s.memory("layernorm forward (ln_1 of block 0)", mb, 2 * u + stats);
  // The residual add fused with the next layernorm: x, delta in; sum, normalised out.
  s.memory("residual add + layernorm forward (fused)", mb * 2 * L, 4 * u + stats);
  s.gemm("qkv forward (+bias epilogue)", mb * L, n, 3 * c, c);
  s.gemm("attn proj forward (+bias epilogue)", mb * L, n, c, c);
  // cuBLASLt GELU_AUX_BIAS: writes the pre-activation (aux, for DGELU) and the GELU output.
  s.gemm("fc1 forward (+bias+GELU epilogue, aux out)", mb * L, n, h, c, 1, 2 * e);
  s.gemm("fc2 forward (+bias epilogue)", mb * L, n, c, h);
  attention_costs(s, cfg.model.attention, d, e, mb * L);
  s.gemm("lm head forward", mb, n, v, c);
  // The whole vocabulary here (tp = 1): ce_fused reads the logits once and overwrites them
  // with dlogits (its second sweep re-reads a row from cache). Under tp, ce_row_max and
  // ce_sumexp_target read the logits and ce_backward reads and overwrites them.
  if (d.tp == 1) s.memory("cross-entropy (fused: statistics and dlogits)", mb, 2 * n * v * e);
  else s.memory("cross-entropy (row max, sum-exp, dlogits)", 3 * mb, 4 * n * v * e / 3);

  // ---- backward, input gradients (I) ----
  s.gemm("lm head dgrad", mb, n, c, v);
  s.memory("layernorm backward dx (ln_f)", mb, 3 * u + stats);  // dy, x in; dx out
  s.gemm("fc2 dgrad (+DGELU epilogue)", mb * L, n, h, c, 1, 0, n * h * e);  // reads the aux
  s.gemm("fc1 dgrad", mb * L, n, c, h);
  s.gemm("attn proj dgrad", mb * L, n, c, c);
  s.gemm("qkv dgrad", mb * L, n, c, 3 * c);
  // The residual gradient joins in the layernorm dgrad: dx = residual + LN'(dy)
  // (dy, x, residual in; dx out), no copy of dy.
  s.memory("layernorm backward dx (+ residual)", mb * 2 * L, 4 * u + stats);

  // ---- backward, weight gradients (W): fp32 gradients accumulated in place ----
  // Bias gradients come from the wgrad GEMMs' BGRADB epilogue (no pass of their own).
  s.gemm("qkv wgrad (+bias grad epilogue)", mb * L, 3 * c, c, n, 1, 8);
  s.gemm("attn proj wgrad (+bias grad epilogue)", mb * L, c, c, n, 1, 8);
  s.gemm("fc1 wgrad (+bias grad epilogue)", mb * L, h, c, n, 1, 8);
  s.gemm("fc2 wgrad (+bias grad epilogue)", mb * L, c, h, n, 1, 8);
  s.gemm("lm head wgrad", mb, v, c, n, 1, 8);
  s.memory("layernorm backward weight (dgamma, dbeta)", mb * (2 * L + 1), 2 * u + stats);
  // wte rows and wpe: dY read, fp32 gradient rows read and written.
  s.memory("embedding backward (scatter-add)", mb, u + 2 * n * c * 8);

  // ---- per step: over every parameter P ----
  const Gpt2ParamCounts counts = gpt2_param_counts([&] {
    ModelConfig m = cfg.model;
    m.vocab_size = int(v);
    return m;
  }());
  const double p = double(counts.total);
  s.memory("zero gradients", 1, 4 * p);
  s.memory("gradient norm (sum of squares)", 1, 4 * p);
  // AdamW applies the clip factor as it reads the gradient and, under bf16, writes the bf16
  // working copy with the update: no pass of its own for either.
  // param, grad, m, v in; param, m, v out (fp32); + the bf16 copy out (2 bytes).
  s.memory(elem == 2 ? "adamw (+ clip factor, + bf16 copy)" : "adamw (+ clip factor)", 1, (28 + (elem == 2 ? 2 : 0)) * p);

  StepPrediction r;
  r.ops = std::move(s.ops);
  for (const OpCost& o : r.ops) r.step_ms += o.ms;
  r.tokens_per_step = double(cfg.training.micro_batch_size) * mb * d.seq_len;
  r.tokens_per_s = r.tokens_per_step / (r.step_ms / 1e3);
  r.flops_per_token = training_flops_per_token(double(counts.matmul), d.n_layer, d.seq_len, d.d_model);
  r.mfu = r.tokens_per_s * r.flops_per_token / dev.bf16_flops;
  r.memory = memory_breakdown(cfg, p, d, elem);
  return r;
}

std::vector<std::string> assumptions(const Config& cfg, const Fractions& f) {
  auto pct = [](double x) { return std::to_string(int(x * 100 + 0.5)) + "%"; };
  return {
      "view: pp=1 tp=1 (the whole model on one device), one step = micro_batch_size x microbatches sequences",
      "time per op = max(FLOPs / (peak x fraction), bytes / (HBM x fraction)): a roofline per kernel",
      "GEMMs with every dimension >= " + std::to_string(f.small_gemm_dim) + ": " + pct(f.gemm_large) +
          " of the matmul peak; thinner GEMMs: " + pct(f.gemm_small),
      "matmul peak: dense bf16 tensor cores in bf16; fp32 without tensor cores in fp32 (TF32 off)",
      "fused attention (flash, cudnn): " + pct(f.flash) + " of the matmul peak, causal half of T^2, backward 2.5x forward",
      "memory-bound kernels: " + pct(f.hbm) + " of HBM bandwidth, minimum bytes read + written",
      "fused: bias into every GEMM epilogue, GELU into FC1 (GELU_AUX_BIAS), DGELU into the FC2 dgrad, bias "
      "gradients into the wgrad epilogue (BGRADB), residual add into the next layernorm, residual gradient "
      "into the layernorm dgrad",
      "not fused: cross-entropy (3 passes over the logits), layernorm weight gradients",
      "per step: zero grads, gradient norm, AdamW (fp32 masters and moments) with the clip factor applied as it "
      "reads each gradient" + std::string(cfg.precision() == Precision::bf16 ? " and the bf16 weight copy written with the update" : ""),
      "attention: " + cfg.model.attention + "; MFU against the dense bf16 peak with llm.c's 6N + 6LTC FLOPs per token",
  };
}

}  // namespace pptrain::bench
