// Validation of a parsed Config (validate() of config.h): every key in its stated range,
// the keys that depend on each other consistent, and the buffer sizes the trainer will form
// from them within 64 bits, each failure one line naming the file and the key.
#include <climits>
#include <cmath>

#include "core/config.h"
#include "core/error.h"
#include "core/input_file.h"

namespace pptrain {
namespace {

void require(bool ok, const Config& c, const std::string& key, const std::string& what) {
  if (!ok) fail(c.source, ": key '", key, "': ", what);
}

// An integer key within [lo, hi]; the bounds are stated in config.h and the message.
void require_range(const Config& c, const std::string& key, int64_t value, int64_t lo, int64_t hi) {
  require(value >= lo && value <= hi, c, key, cat("expected an integer in [", lo, ", ", hi, "], got ", value));
}

// A buffer of `elements` 4-byte values must have a byte count that fits in 63 bits (sizes
// are computed in int64 and size_t): a config-time check, so no product overflows later.
void require_size(const Config& c, const std::string& key, const char* what,
                  std::initializer_list<int64_t> factors) {
  auto elements = checked_product(factors);
  auto bytes = elements ? checked_mul(*elements, uint64_t(4)) : std::nullopt;
  require(bytes && *bytes <= uint64_t(INT64_MAX), c, key,
          cat(what, " overflows 64-bit sizes (expected a smaller model or batch)"));
}

// Sizes of the products later code forms from the keys (each factor already in range).
void validate_sizes(const Config& c) {
  const auto& m = c.model;
  const int64_t B = c.training.micro_batch_size, T = m.seq_len, C = m.d_model, V = m.vocab_size;
  const int64_t L = m.n_layer, NH = m.n_head;
  require(int64_t(c.parallel.pp) * c.parallel.tp * c.parallel.dp <= kMaxWorldSize, c, "parallel.dp",
          cat("pp x tp x dp = ", int64_t(c.parallel.pp) * c.parallel.tp * c.parallel.dp, " ranks, more than ",
              kMaxWorldSize));
  const int64_t global_batch = B * c.parallel.microbatches * c.parallel.dp;  // < 2^60 by the ranges
  require(global_batch <= INT32_MAX, c, "training.micro_batch_size",
          cat("micro_batch_size x microbatches x dp = ", global_batch, " sequences per step, more than ", INT32_MAX));
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x d_model (activations)", {B, T, C});
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x 4 d_model (MLP activations)", {B, T, 4, C});
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x vocab_size (logits)", {B, T, V});
  require_size(c, "training.micro_batch_size", "micro_batch_size x n_head x seq_len^2 (attention scores)", {B, NH, T, T});
  require_size(c, "model.d_model", "n_layer x 12 d_model^2 (block weights)", {L, 12, C, C});
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x 3 ffn_hidden (SwiGLU activations)",
               {B, T, 3, m.mlp_hidden()});
  require_size(c, "model.ffn_hidden", "n_layer x 3 d_model x ffn_hidden (SwiGLU weights)", {L, 3, C, m.mlp_hidden()});
  require_size(c, "model.vocab_size", "vocab_size x d_model (embedding)", {V, C});
}

// The keys of the Llama family: ranges for llama, their defaults for gpt2 (which has no
// grouped-query attention, a 4·d_model GELU MLP, learned positions and layernorm).
void validate_llama_keys(const Config& c) {
  const auto& m = c.model;
  if (!m.llama()) {
    const ModelConfig defaults;
    require(m.rope_scaling == defaults.rope_scaling, c, "model.rope_scaling",
            "applies to the Llama family only (gpt2 learns its positions)");
    require(m.kv_heads() == m.n_head, c, "model.n_kv_head", "applies to arch: llama only (gpt2 has n_head key/value heads)");
    require(m.mlp_hidden() == 4 * int64_t(m.d_model), c, "model.ffn_hidden",
            "applies to arch: llama only (the gpt2 MLP is 4 x d_model wide)");
    require(m.rope_theta == defaults.rope_theta, c, "model.rope_theta",
            "applies to arch: llama only (gpt2 learns its positions)");
    require(m.norm_eps == defaults.norm_eps, c, "model.norm_eps", "applies to arch: llama only (gpt2's layernorm eps is 1e-5)");
    return;
  }
  require_range(c, "model.n_kv_head", m.kv_heads(), 1, m.n_head);
  require(m.n_head % m.kv_heads() == 0, c, "model.n_kv_head",
          cat("n_kv_head ", m.kv_heads(), " must divide n_head ", m.n_head, " (each key/value head serves a group of query heads)"));
  require(m.attention_head_dim() % 2 == 0 && m.attention_head_dim() / 2 <= kMaxRotaryPlanes, c,
          m.head_dim ? "model.head_dim" : "model.n_head",
          cat("the head size ", m.attention_head_dim(), " must be even (the rotary embedding turns pairs) and at most ",
              2 * kMaxRotaryPlanes));
  const RopeScaling& r = m.rope_scaling;
  require(r.type == "none" || r.type == "linear" || r.type == "llama3", c, "model.rope_scaling",
          "expected none, linear or llama3, got '" + r.type + "'");
  require(r.factor > 0 && r.factor <= 1e6, c, "model.rope_factor", cat("expected 0 < rope_factor <= 1e6, got ", r.factor));
  require(r.type != "none" || r.factor == 1, c, "model.rope_factor", "applies with rope_scaling linear or llama3 only");
  require(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor && r.high_freq_factor <= 1e6, c,
          "model.rope_high_freq_factor",
          cat("expected 0 < rope_low_freq_factor < rope_high_freq_factor <= 1e6, got ", r.low_freq_factor, " and ",
              r.high_freq_factor));
  require_range(c, "model.rope_original_max_positions", r.original_max_positions, 1, kMaxSeqLen);
  require_range(c, "model.ffn_hidden", m.mlp_hidden(), 1, kMaxWidth * 4);
  require(m.rope_theta > 1 && m.rope_theta <= 1e12, c, "model.rope_theta",
          cat("expected 1 < rope_theta <= 1e12, got ", m.rope_theta));
  require(m.norm_eps > 0 && m.norm_eps <= 1, c, "model.norm_eps", cat("expected 0 < norm_eps <= 1, got ", m.norm_eps));
}

}  // namespace

// The head sizes the handwritten flash kernels are instantiated for (kernels/flash_attention.cu;
// a kernel test checks that the two lists agree).
bool flash_kernel_head_dim(const ModelConfig& m) {
  const int hd = m.attention_head_dim();
  return hd == 32 || hd == 64 || hd == 128;
}

void validate(const Config& c) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const auto& t = c.training;
  require(c.device == "cpu" || c.device == "cuda", c, "device", "expected cpu or cuda, got '" + c.device + "'");
  require(m.arch == "gpt2" || m.llama(), c, "model.arch",
          "expected gpt2, llama, mistral, qwen2 or qwen3, got '" + m.arch + "'");
  require_range(c, "model.n_layer", m.n_layer, 1, kMaxLayers);
  require_range(c, "model.n_head", m.n_head, 1, kMaxWidth);
  require_range(c, "model.d_model", m.d_model, 1, kMaxWidth);
  require_range(c, "model.head_dim", m.head_dim, 0, kMaxWidth);
  require(m.head_dim == 0 || m.llama(), c, "model.head_dim",
          "applies to the Llama family only (gpt2's heads are d_model/n_head wide)");
  require(m.head_dim != 0 || m.d_model % m.n_head == 0, c, "model.n_head",
          cat("n_head ", m.n_head, " must divide d_model ", m.d_model, " (or set model.head_dim)"));
  require_size(c, "model.head_dim", "n_head x head_dim (query width)", {m.n_head, m.head_dim});
  require(int64_t(m.n_head) * m.attention_head_dim() <= kMaxWidth, c, "model.head_dim",
          cat("n_head x head_dim = ", int64_t(m.n_head) * m.attention_head_dim(), ", more than ", kMaxWidth));
  require_range(c, "model.seq_len", m.seq_len, 1, kMaxSeqLen);
  require_range(c, "model.vocab_size", m.vocab_size, 2, kMaxVocab);
  require(m.attention == "flash" || m.attention == "cudnn" || m.attention == "naive", c, "model.attention",
          "expected flash, cudnn or naive, got '" + m.attention + "'");
  require(m.attention != "cudnn" || c.device == "cuda", c, "model.attention",
          "cudnn needs device: cuda (on the cpu expected naive or flash)");
  require(m.attention != "flash" || c.device != "cuda" || flash_kernel_head_dim(m), c, "model.attention",
          cat("flash on cuda needs a head size of 32, 64 or 128 (its kernels' tiles), got ",
              m.attention_head_dim(), "; naive takes any"));
  // cuDNN's fused attention takes 16-bit tensors only, and head sizes that are multiples of 8
  // up to 128 (its backward on Ampere; backend/cuda/cudnn_attention.h).
  require(m.attention != "cudnn" || t.precision == "bf16", c, "model.attention",
          "cudnn needs training.precision: bf16 (cuDNN's fused attention has no fp32 path)");
  require(m.attention != "cudnn" || (m.attention_head_dim() % 8 == 0 && m.attention_head_dim() <= 128), c,
          "model.attention",
          cat("cudnn needs a head size that is a multiple of 8 and at most 128, got ", m.attention_head_dim()));
  validate_llama_keys(c);
  require_range(c, "parallel.pp", p.pp, 1, kMaxWorldSize);
  require_range(c, "parallel.tp", p.tp, 1, kMaxWorldSize);
  require_range(c, "parallel.dp", p.dp, 1, kMaxWorldSize);
  require_range(c, "parallel.microbatches", p.microbatches, 1, kMaxMicrobatches);
  require_range(c, "parallel.stages_per_rank", p.stages_per_rank, 1, kMaxStagesPerRank);
  require_range(c, "parallel.profile_repeats", p.profile_repeats, 1, kMaxProfileRepeats);
  require(p.comm == "auto" || p.comm == "nccl" || p.comm == "mpi", c, "parallel.comm",
          "expected auto, nccl or mpi, got '" + p.comm + "'");
  require(p.comm != "nccl" || c.device == "cuda", c, "parallel.comm",
          "nccl needs device: cuda (the cpu backend's groups use MPI)");
  require(p.zero == 0 || p.zero == 1, c, "parallel.zero",
          cat("expected 0 or 1 (1: AdamW moments sharded over the dp ranks; with dp 1 it changes nothing), got ",
              p.zero));
  require(p.memory_per_rank_gib >= 0 && p.memory_per_rank_gib <= 1e6, c, "parallel.memory_per_rank_gib",
          cat("expected GiB in [0, 1e6] (0: no limit), got ", p.memory_per_rank_gib));
  require(m.n_head % p.tp == 0, c, "parallel.tp",
          cat("tp ", p.tp, " must divide model.n_head ", m.n_head));
  require(m.kv_heads() % p.tp == 0, c, "parallel.tp",
          cat("tp ", p.tp, " must divide model.n_kv_head ", m.kv_heads(), " (the key/value heads are split over tp)"));
  require(!m.llama() || m.mlp_hidden() % p.tp == 0, c, "parallel.tp",
          cat("tp ", p.tp, " must divide model.ffn_hidden ", m.mlp_hidden(), " (the SwiGLU columns are split over tp)"));
  require(!p.schedule.empty(), c, "parallel.schedule", "expected a schedule name, file:PATH.csv or auto");
  const int stages = c.total_stages();
  if (p.layers_per_stage.empty()) {
    require(m.n_layer >= stages, c, "parallel.stages_per_rank",
            cat("model.n_layer ", m.n_layer, " is fewer than the ", stages, " pipeline stages (pp ", p.pp,
                " x stages_per_rank ", p.stages_per_rank, ")"));
  } else {
    require(int(p.layers_per_stage.size()) == stages, c, "parallel.layers_per_stage",
            cat("expected ", stages, " entries (pp x stages_per_rank), got ", p.layers_per_stage.size()));
    // The first stage holds the embedding and the last the head, so either may hold no
    // block (a planner puts a costly head alone); a stage between them would be empty.
    int64_t sum = 0;
    for (int s = 0; s < stages; ++s) {
      const int n = p.layers_per_stage[s];
      const bool end = s == 0 || s == stages - 1;
      if (end)
        require(n >= 0, c, cat("parallel.layers_per_stage[", s, "]"), cat("expected 0 or more blocks, got ", n));
      else
        require(n >= 1, c, cat("parallel.layers_per_stage[", s, "]"),
                cat("expected at least 1 block (only the first and last stage, which hold the embedding and "
                    "the head, may hold none), got ", n));
      sum += n;
    }
    require(sum == m.n_layer, c, "parallel.layers_per_stage",
            cat("entries sum to ", sum, " but model.n_layer is ", m.n_layer));
  }
  require_range(c, "training.steps", t.steps, 0, INT32_MAX);
  require_range(c, "training.micro_batch_size", t.micro_batch_size, 1, kMaxMicroBatchSize);
  // Floats: finite (checked as they are read) and in the ranges of config.h.
  require(t.lr > 0 && t.lr <= kMaxLr, c, "training.lr", cat("expected 0 < lr <= ", kMaxLr, ", got ", t.lr));
  require(t.min_lr >= 0 && t.min_lr <= t.lr, c, "training.min_lr",
          cat("expected 0 <= min_lr <= lr (", t.lr, "), got ", t.min_lr));
  require_range(c, "training.warmup_steps", t.warmup_steps, 0, INT32_MAX);
  require(t.weight_decay >= 0 && t.weight_decay <= kMaxWeightDecay, c, "training.weight_decay",
          cat("expected 0 <= weight_decay <= ", kMaxWeightDecay, ", got ", t.weight_decay));
  require(t.grad_clip >= 0 && t.grad_clip <= kMaxGradClip, c, "training.grad_clip",
          cat("expected 0 <= grad_clip <= ", kMaxGradClip, " (0 disables clipping), got ", t.grad_clip));
  require(t.beta1 >= 0 && t.beta1 < 1, c, "training.beta1", cat("expected 0 <= beta1 < 1, got ", t.beta1));
  require(t.beta2 >= 0 && t.beta2 < 1, c, "training.beta2", cat("expected 0 <= beta2 < 1, got ", t.beta2));
  require(t.eps > 0 && t.eps <= kMaxEps, c, "training.eps", cat("expected 0 < eps <= ", kMaxEps, ", got ", t.eps));
  require(t.precision == "fp32" || t.precision == "bf16", c, "training.precision",
          "expected fp32 or bf16, got '" + t.precision + "'");
  require(t.precision == "fp32" || c.device == "cuda", c, "training.precision",
          "bf16 needs device: cuda (the cpu backend is fp32)");
  require_range(c, "training.eval_every", t.eval_every, 0, INT32_MAX);
  require_range(c, "training.eval_batches", t.eval_batches, 0, kMaxEvalBatches);
  require(t.on_nonfinite == "stop" || t.on_nonfinite == "skip", c, "training.on_nonfinite",
          "expected stop or skip, got '" + t.on_nonfinite + "'");
  require_range(c, "training.max_skipped", t.max_skipped, 1, INT32_MAX);
  require(t.on_spike == "stop" || t.on_spike == "rollback" || t.on_spike == "off", c, "training.on_spike",
          "expected stop, rollback or off, got '" + t.on_spike + "'");
  require(t.spike_factor > 1 && t.spike_factor <= 1e6, c, "training.spike_factor",
          cat("expected a factor > 1 (a spike is a loss above factor x its running mean), got ", t.spike_factor));
  require_range(c, "training.spike_window", t.spike_window, 1, 1000000);
  require_range(c, "training.max_rollbacks", t.max_rollbacks, 1, INT32_MAX);
  require(t.on_spike != "rollback" || !c.checkpoint.dir.empty(), c, "training.on_spike",
          "rollback needs checkpoint.dir (the checkpoints it rolls back to)");
  const auto is_mode = [](const std::string& m) { return m == "none" || m == "attention" || m == "full"; };
  if (t.recompute.per_stage.empty()) {
    require(is_mode(t.recompute.every) || t.recompute.every == "auto", c, "training.recompute",
            "expected none, attention, full, auto or a list of one per stage, got '" + t.recompute.every + "'");
    // auto is the planner's choice against a memory limit: without costs and a limit there
    // is nothing to choose by (a silent none would surprise whoever asked for auto).
    require(!t.recompute.is_auto() || (!c.parallel.profile.empty() && c.parallel.memory_per_rank_gib > 0), c,
            "training.recompute",
            "auto needs parallel.profile (measure, or a cost file of pptrain profile) and "
            "parallel.memory_per_rank_gib (the limit the per-stage choice must fit)");
  } else {
    require(int(t.recompute.per_stage.size()) == c.total_stages(), c, "training.recompute",
            cat("expected ", c.total_stages(), " entries (pp x stages_per_rank), got ", t.recompute.per_stage.size()));
    for (size_t s = 0; s < t.recompute.per_stage.size(); ++s)
      require(is_mode(t.recompute.per_stage[s]), c, cat("training.recompute[", s, "]"),
              "expected none, attention or full, got '" + t.recompute.per_stage[s] + "'");
  }
  require_range(c, "checkpoint.every", c.checkpoint.every, 0, INT32_MAX);
  require_range(c, "checkpoint.keep_last", c.checkpoint.keep_last, 1, INT32_MAX);
  require(!c.checkpoint.resume.empty(), c, "checkpoint.resume", "expected auto, none or a path");
  require_range(c, "logging.every", c.logging.every, 1, INT32_MAX);
  require_range(c, "logging.sample_tokens", c.logging.sample_tokens, 0, kMaxSampleTokens);
  require_range(c, "logging.sample_every", c.logging.sample_every, 0, INT_MAX);
  require_range(c, "logging.op_profile", c.logging.op_profile, 0, INT32_MAX);
  require(c.logging.op_profile_file.empty() || c.logging.op_profile > 0, c, "logging.op_profile_file",
          "needs logging.op_profile > 0 (the steps to profile)");
  require(!c.logging.kernel_profile || c.logging.op_profile > 0, c, "logging.kernel_profile",
          "needs logging.op_profile > 0 (the steps whose kernels are recorded)");
  require(!c.logging.kernel_profile || c.device == "cuda", c, "logging.kernel_profile",
          "needs device: cuda (the cpu backend runs no kernels to record; its op profile is the whole story)");
  // std::isfinite: a YAML .nan or .inf parses as a double; an infinite wait is spelled 0.
  require(std::isfinite(c.runtime.watchdog_s) && c.runtime.watchdog_s >= 0, c, "runtime.watchdog_s",
          cat("expected a finite number of seconds >= 0 (0 disables the watchdog), got ", c.runtime.watchdog_s));
  validate_sizes(c);
}

}  // namespace pptrain
