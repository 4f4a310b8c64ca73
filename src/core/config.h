// Experiment configuration: a YAML file, parsed with yaml-cpp into typed structs with
// defaults, overridden by `section.key=value` arguments and validated before any work
// starts. Key names are a contract (DESIGN.md, "Config keys"): add keys, rename none.
// configs/reference.yaml documents every key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.h"

namespace pptrain {

// Rotary frequency scaling as transformers' rope_scaling / rope_parameters computes it
// (core/rotary.h): none; linear (every inverse frequency / factor); llama3 (Llama 3.1's:
// the planes whose wavelength exceeds original_max_positions / low_freq_factor turn
// factor times slower, those shorter than original_max_positions / high_freq_factor as
// they were, the ones between interpolated).
struct RopeScaling {
  std::string type = "none";           // none | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int original_max_positions = 8192;   // llama3
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  // gpt2, or the Llama family (one block, model/llama_block.h): llama, mistral (Llama's
  // block; Hugging Face MistralForCausalLM), qwen2 (biases on q, k and v), qwen3 (RMSNorm of
  // each query and key head before the rotary embedding).
  std::string arch = "gpt2";           // gpt2 | llama | mistral | qwen2 | qwen3
  int n_layer = 12;
  int n_head = 12;
  int d_model = 768;
  int seq_len = 1024;
  int vocab_size = 50257;
  // Unset in the file: true for gpt2, false for llama (resolved when the config is parsed).
  bool tie_embeddings = true;
  // Llama only (Hugging Face LlamaConfig's meaning; gpt2 takes none of them). Resolved when
  // the config is parsed: n_kv_head 0 = n_head (multi-head attention), ffn_hidden 0 = 8/3 ·
  // d_model rounded up to a multiple of 256 (Llama's rule, llama_ffn_hidden below).
  int n_kv_head = 0;                   // key/value heads (grouped-query attention); divides n_head
  int ffn_hidden = 0;                  // SwiGLU width F
  double rope_theta = 10000.0;         // rotary embedding base
  RopeScaling rope_scaling;            // model.rope_scaling (type), rope_factor, rope_low_freq_factor, ...
  double norm_eps = 1.0e-6;            // RMSNorm epsilon (inside the square root)
  // The width of one attention head; 0 = d_model / n_head. The Llama family may set another
  // (Mistral's and Qwen's configs do): q is n_head·head_dim wide, k and v n_kv_head·head_dim,
  // the output projection maps n_head·head_dim back to d_model.
  int head_dim = 0;

  // The Llama family's block (llama, mistral, qwen2, qwen3).
  bool llama() const { return arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3"; }
  // Biases on the q, k and v projections (qwen2).
  bool qkv_bias() const { return arch == "qwen2"; }
  // RMSNorm of each query and key head before the rotary embedding (qwen3).
  bool qk_norm() const { return arch == "qwen3"; }
  // The resolved head width (0 when n_head does not divide d_model and none is set).
  int attention_head_dim() const { return head_dim ? head_dim : (n_head > 0 && d_model % n_head == 0 ? d_model / n_head : 0); }
  // The resolved values, also for a ModelConfig built in code (no parse): 0 means the default.
  int kv_heads() const { return n_kv_head ? n_kv_head : n_head; }
  int mlp_hidden() const;              // ffn_hidden, or its default for the arch
  // The attention core: naive (materialises the [B,NH,T,T] probabilities), flash (fused,
  // keeps the per-row log-sum-exp), cudnn (cuDNN's fused attention, device: cuda). Empty
  // in the file means the device's default, resolved when the config is parsed: flash on
  // cuda; naive on cpu, which keeps the cpu's figures and losses as they were.
  // On cuda the default is the fastest core this binary and the model allow: cudnn where
  // the cuda backend was built with cuDNN (BuildFeatures) and the model fits cuDNN's fused
  // attention (bf16, multi-head, head size a multiple of 8 up to 128), else flash where the
  // head size is one the flash kernels take (32, 64, 128), else naive; an explicit flash
  // where the kernels lack the head size is a one-line error.
  std::string attention;
  // Why the default was taken, for the start-up line; "" when the config names the core.
  // Not part of the config (to_yaml writes the resolved core).
  std::string attention_default;
};

struct ParallelConfig {
  int pp = 1;
  int tp = 1;
  int dp = 1;
  std::string schedule = "1f1b";       // a generator name, file:PATH.csv, or auto
  int microbatches = 8;
  int stages_per_rank = 1;
  // Blocks per stage, pp·stages_per_rank entries; empty = auto (spread evenly). The first
  // and last stage may hold 0 (only the embedding, only the head), the others >= 1.
  std::vector<int> layers_per_stage;
  // Measured costs for the planner (partition/auto_layout.h): "" none (layers_per_stage
  // auto balances FLOPs), "measure" (timed at start-up), or a cost file of pptrain profile.
  std::string profile;
  // Microbatches each layer kind is timed for when profiled (median kept; pptrain profile,
  // pptrain plan and parallel.profile: measure). More spread a profile over a longer
  // stretch, which on a shared machine whose speed drifts makes it steadier.
  int profile_repeats = 10;
  // ZeRO stage 1: 1 shards the AdamW moments over the dp group (each dp rank updates one
  // 1/dp range of the flattened parameters: reduce-scatter, sharded update, all-gather);
  // 0 keeps full moments on every replica. With dp 1 it changes nothing.
  int zero = 0;
  // How the groups of a cuda job move tensors: nccl; mpi (StagedMpiComm: through pinned
  // host buffers, for ranks that share a GPU, which NCCL refuses); auto: nccl for a group
  // whose ranks each have a GPU of their own, mpi for one where two share a device. The
  // cpu backend always uses MPI (auto or mpi).
  std::string comm = "auto";
  // The memory one rank may use, in GiB (0: no limit): what the planner at start-up fits
  // its choices to (parallel.profile given): the split of layers_per_stage auto and the
  // per-stage choice of training.recompute: auto. `pptrain plan --memory-per-rank` writes it.
  double memory_per_rank_gib = 0;
};

// training.recompute: one mode for every stage (a scalar), or a list of one mode per
// pipeline stage (pp·stages_per_rank entries, stage order). `auto` (scalar only) leaves the
// choice to the planner (partition/auto_layout.h), which replaces it with a list.
struct RecomputeConfig {
  std::string every = "none";          // none | attention | full | auto; unused with per_stage
  std::vector<std::string> per_stage;  // [pp·stages_per_rank] none | attention | full; empty: every
  const std::string& of_stage(int stage) const { return per_stage.empty() ? every : per_stage[size_t(stage)]; }
  bool is_auto() const { return per_stage.empty() && every == "auto"; }
  // Whether any stage uses `mode`.
  bool uses(const std::string& mode) const {
    if (per_stage.empty()) return every == mode;
    for (const std::string& m : per_stage)
      if (m == mode) return true;
    return false;
  }
};

struct TrainingConfig {
  int steps = 1000;
  int micro_batch_size = 4;
  double lr = 6.0e-4;
  double min_lr = 6.0e-5;
  int warmup_steps = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;              // 0 disables clipping
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1.0e-8;
  uint64_t seed = 1337;
  std::string precision = "fp32";      // fp32 | bf16 (bf16 on cuda only)
  int eval_every = 100;                // 0 disables evaluation
  int eval_batches = 10;
  // A step whose loss or global gradient norm is not finite (NaN, inf): stop = exit
  // non-zero naming the step and the first tensor with a non-finite gradient, saving
  // nothing; skip = drop the step (no update; the data position advances) and stop after
  // max_skipped non-finite steps in a row.
  std::string on_nonfinite = "stop";   // stop | skip
  int max_skipped = 10;
  // A finite divergence (train/spike_guard.h): a step whose loss exceeds spike_factor
  // times the running mean of the previous losses (an exponential moving average over
  // about spike_window steps, watched once that many steps of this run have passed) is a
  // spike. stop = exit 1 naming the step, saving nothing; rollback = load the newest
  // checkpoint of checkpoint.dir, skip the batches from it to the spike and go on (PaLM's
  // recipe), at most max_rollbacks times in the run; off = train on.
  std::string on_spike = "stop";       // stop | rollback | off
  double spike_factor = 3.0;
  int spike_window = 50;
  int max_rollbacks = 3;
  // Post-validation (train/trainer.h): apply each step's update optimistically (no
  // clipping, finite) without waiting for the step's loss and norm reduction, validate it
  // during the next step and roll the rare failing step back exactly. Costs a backup of
  // masters, gradients and moments: 16 bytes per parameter element on the rank.
  bool post_validation = false;
  // Activation recomputation (model/dims.h): none keeps every block's activations from F
  // to W; attention drops naive attention's probabilities [B,NH,T,T] after F and recomputes
  // them at the start of I; full keeps only each block's input after F and re-runs the
  // block's forward at the start of I (one more forward per block).
  RecomputeConfig recompute;
};

struct DataConfig {
  std::string train;                   // glob of llm.c token shards
  std::string val;
  bool shuffle = false;                // shuffle the order of sequences (seeded)
};

struct CheckpointConfig {
  std::string dir;                     // "" disables checkpoints
  int every = 0;                       // steps; 0 = only at the end (when dir is set)
  int keep_last = 2;
  std::string resume = "auto";         // auto | none | PATH
};

struct LoggingConfig {
  int every = 10;
  std::string metrics;                 // JSON Lines file, "" = none
  std::string trace;                   // Chrome trace JSON, "" = none
  int sample_tokens = 200;             // generated at the end of a byte-level run; 0 = none
  int sample_every = 0;                // also a sample every N steps (watch it learn); 0 = none
  // Per-op timing of this many steps after the first (which allocates and warms up); 0 =
  // off (backend/profiled_ops.h). The table goes to the log, the JSON to op_profile_file.
  int op_profile = 0;
  std::string op_profile_file;         // "" = none; rank N > 0 writes PATH.rankN
  // Also the kernels the device ran for each op in those steps (cuda: CUPTI activity
  // records; backend/kernel_profile.h): a second table, "kernels" in the JSON, a trace track.
  bool kernel_profile = false;
};

// The run's own health (runtime/watchdog.h).
struct RuntimeConfig {
  // A rank that completes no action, collective, data read or evaluation batch for this
  // many seconds prints what it waits on and ends the job; 0 disables the watchdog.
  double watchdog_s = 300;
};

struct Config {
  std::string device = "cpu";          // cpu | cuda
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  RuntimeConfig runtime;

  std::string source;                  // the file it came from, for messages
  int world_size() const { return parallel.pp * parallel.tp * parallel.dp; }
  int total_stages() const { return parallel.pp * parallel.stages_per_rank; }
  Precision precision() const { return training.precision == "bf16" ? Precision::bf16 : Precision::fp32; }
  // ZeRO-1 (parallel.zero: 1) with more than one dp replica: the AdamW moments are sharded
  // over the dp ranks, each updating its 1/dp range of the flattened parameters.
  bool zero_shards_moments() const { return parallel.zero == 1 && parallel.dp > 1; }
  // ... and the fp32 masters too, under bf16 only: there the layers compute with the bf16
  // copies, which are what the dp ranks all-gather. Under fp32 the masters ARE the weights
  // the layers compute with, so every rank keeps them whole.
  bool zero_shards_masters() const { return zero_shards_moments() && precision() == Precision::bf16; }
  int global_batch_sequences() const {
    return training.micro_batch_size * parallel.microbatches * parallel.dp;
  }
};

// The ranges validate() enforces beyond the obvious (>= 1, >= 0). Floats must be finite.
// Integer bounds are far above any real run and keep every product the trainer forms from
// them in 64 bits (validate() also checks the buffer sizes B·T·C, B·T·V, B·NH·T², L·12C²).
inline constexpr int kMaxLayers = 1 << 14;          // model.n_layer
inline constexpr int kMaxRotaryPlanes = 256;        // model.head_dim / 2 (core/rotary.h)
inline constexpr int kMaxWidth = 1 << 17;           // model.d_model, model.n_head
inline constexpr int kMaxSeqLen = 1 << 20;          // model.seq_len
inline constexpr int kMaxVocab = 1 << 24;           // model.vocab_size
inline constexpr int kMaxWorldSize = 1 << 20;       // parallel.pp, tp, dp and their product
inline constexpr int kMaxMicrobatches = 1 << 20;    // parallel.microbatches
inline constexpr int kMaxStagesPerRank = 1 << 10;   // parallel.stages_per_rank
inline constexpr int kMaxProfileRepeats = 100000;   // parallel.profile_repeats
inline constexpr int kMaxMicroBatchSize = 1 << 20;  // training.micro_batch_size
inline constexpr int kMaxEvalBatches = 1 << 20;     // training.eval_batches
inline constexpr int kMaxSampleTokens = 1 << 20;    // logging.sample_tokens
inline constexpr double kMaxLr = 10;                // training.lr in (0, 10]; min_lr in [0, lr]
inline constexpr double kMaxWeightDecay = 10;       // training.weight_decay in [0, 10]
inline constexpr double kMaxGradClip = 1e6;         // training.grad_clip in [0, 1e6], 0 = off
inline constexpr double kMaxEps = 1e-2;             // training.eps in (0, 1e-2]; beta1, beta2 in [0, 1)
inline constexpr uint64_t kMaxConfigBytes = 1 << 20;  // a config file

// Llama's default SwiGLU width for d_model C: 8C/3 (integer division, as int(2 · 4C / 3)),
// rounded up to a multiple of 256.
int llama_ffn_hidden(int d_model);

// Whether the handwritten flash kernels are instantiated for the model's head size
// d_model / n_head (kernels/flash_attention.cu): the cuda default attention and a check.
bool flash_kernel_head_dim(const ModelConfig& m);

// What this binary can run that a config's defaults depend on. cli/ fills it from the
// backends; a config parsed without it (tests, a checkpoint's stored config, which names
// every value anyway) assumes none of them.
struct BuildFeatures {
  bool cudnn = false;  // the cuda backend was built with cuDNN (model.attention: cudnn)
};

// An unset model.attention, resolved for the device, precision, model and build (the
// default of ModelConfig::attention), with its reason in model.attention_default.
void resolve_default_attention(Config& c, const BuildFeatures& build);

// Parses `path`, applies `overrides` ("section.key=value", value parsed as YAML) and
// validates. Throws pptrain::Error naming the file and key on any problem.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   const BuildFeatures& build = {});
// Same, from YAML text (tests, checkpoints); `source` names it in messages.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {}, const BuildFeatures& build = {});
// The fully resolved config as YAML (stored in checkpoints; parses back to the same Config).
std::string to_yaml(const Config& c);
// Checks values and combinations; throws pptrain::Error naming source and key.
void validate(const Config& c);

}  // namespace pptrain
