#include "job/memory_estimate.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "partition/partition.h"
#include "pipeline/generators.h"

namespace pptrain {
namespace {

constexpr double kFp32 = 4, kBf16 = 2, kInt32 = 4;
constexpr double kCpuFlashBlock = 64;            // rows per flash tile (backend/cpu/attention.cpp)
constexpr double kCublasLtWorkspace = 32 << 20;  // backend/cuda/cuda_lt_gemm.h

// N = B·T rows of a microbatch, without ModelDims::rows()'s int overflow for absurd batches.
double rows(const ModelDims& d) { return double(d.batch) * d.seq_len; }

// Elements of one block's parameters on one tp rank (C = d_model, tp divides C, 4C and the
// heads): ln_1, ln_2 (weight, bias) replicated; qkv [3C/tp, C] + bias [3C/tp]; attention
// proj [C, C/tp] + replicated bias [C]; fc [4C/tp, C] + bias [4C/tp]; mlp proj [C, 4C/tp]
// + replicated bias [C].
double block_parameter_count(double c, double tp) {
  const double norms = 4 * c;
  const double qkv = 3 * c / tp * c + 3 * c / tp;
  const double proj = c * (c / tp) + c;
  const double fc = 4 * c / tp * c + 4 * c / tp;
  const double fc2 = c * (4 * c / tp) + c;
  return norms + qkv + proj + fc + fc2;
}

// One block's slot: the buffers Block<T>::for_each_buffer lists (N = B·T rows, CL = C/tp,
// HL = 4C/tp, NHL = heads/tp): in the storage type ln1, x2, ln2, dln2, dx2, dln1 [N,C];
// qkv, dqkv [N,3CL]; attn, dattn [N,CL]; fc1, gelu, dfc1 [N,HL]; naive attention's
// probabilities [B,NHL,T,T]; in fp32 the two layernorms' mean and rstd [N] and fused
// attention's lse and delta [B,NHL,T].
double block_slot_bytes(const ModelDims& d, double s) {
  const double n = rows(d), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  const double t = d.seq_len, heads = double(d.batch) * d.local_heads();
  double bytes = s * n * (6 * c + 6 * cl + 2 * cl + 3 * hl) + kFp32 * 4 * n;
  bytes += d.fused_attention ? kFp32 * 2 * heads * t : s * heads * t * t;
  return bytes;
}

// The head's slot without its logits: h, dh [N,C] in the storage type; mean, rstd [N] and
// the row statistics [3N] in fp32.
double head_slot_bytes_without_logits(const ModelDims& d, double s) {
  const double n = rows(d), c = d.d_model;
  return s * 2 * n * c + kFp32 * 5 * n;
}

double storage_bytes(Precision p) { return p == Precision::bf16 ? kBf16 : kFp32; }

std::vector<StageSpec> stages_of(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank) {
  std::vector<StageSpec> mine;
  for (const StageSpec& spec : stage_specs(cfg))
    if (schedule.rank_of(spec.index) == pp_rank) mine.push_back(spec);
  return mine;
}

// The per-stage peak of live microbatches, the larger of training and evaluation.
std::vector<int> pool_sizes(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank) {
  std::vector<int> peak = peak_live_microbatches(schedule, pp_rank);
  const bool evaluates = cfg.training.eval_every > 0 && cfg.training.eval_batches > 0 && !cfg.data.val.empty();
  if (evaluates) {
    const std::vector<int> eval = peak_live_microbatches(pipeline::make_forward_only(schedule), pp_rank);
    for (size_t s = 0; s < peak.size(); ++s) peak[s] = std::max(peak[s], eval[s]);
  }
  return peak;
}

double workspace_bytes(const Config& cfg) {
  if (cfg.device == "cuda") return kCublasLtWorkspace;
  const double t = cfg.model.seq_len;
  const bool fused = cfg.model.attention == "flash" || cfg.model.attention == "cudnn";
  const double per_thread = fused ? 2 * kCpuFlashBlock * t : t * t;
  return double(omp_get_max_threads()) * per_thread * kFp32;
}

}  // namespace

double MemoryEstimate::total() const {
  double sum = 0;
  for (const MemoryItem& item : items) sum += item.bytes;
  return sum;
}

const MemoryItem& MemoryEstimate::largest() const {
  PPTRAIN_CHECK(!items.empty());
  return *std::max_element(items.begin(), items.end(),
                           [](const MemoryItem& a, const MemoryItem& b) { return a.bytes < b.bytes; });
}

double MemoryEstimate::bytes_of(const std::string& prefix) const {
  for (const MemoryItem& item : items)
    if (item.what.starts_with(prefix)) return item.bytes;
  return 0;
}

double global_parameter_count(const ModelConfig& m) {
  const double c = m.d_model;
  // wte [V,C], wpe [T,C], the blocks, ln_f [C] weight and bias; the LM head is tied to wte.
  return double(m.vocab_size) * c + double(m.seq_len) * c + double(m.n_layer) * block_parameter_count(c, 1) +
         2 * c;
}

double rank_parameter_count(const Config& cfg, const std::vector<StageSpec>& my_stages, int tp_rank) {
  const ModelDims d = ModelDims::from(cfg.model, cfg.training.micro_batch_size, cfg.parallel.tp, tp_rank);
  const double c = d.d_model, tp = d.tp;
  double count = 0;
  bool has_wte = false;
  for (const StageSpec& spec : my_stages) {
    count += double(spec.num_blocks) * block_parameter_count(c, tp);
    if (spec.has_embedding) count += double(d.seq_len) * c;  // wpe, replicated
    if (spec.has_head) count += 2 * c;                          // ln_f
    has_wte = has_wte || spec.has_embedding || spec.has_head;
  }
  if (has_wte) count += double(d.local_vocab()) * c;  // [Vp/tp, C], one tensor per rank
  return count;
}

double checkpoint_tensor_bytes(const ModelConfig& m) { return 3 * kFp32 * global_parameter_count(m); }

double stage_slot_bytes(const ModelDims& d, const StageSpec& spec, Precision precision, double* logits_bytes) {
  const double s = storage_bytes(precision), nc = rows(d) * d.d_model;
  // The stage's acts[i] and grads[i] [N,C] for i = 0..L over its L layers, but for the
  // ends the embedding (tokens in) and the head (loss out) do not need.
  const double layers = double(spec.num_blocks) + spec.has_embedding + spec.has_head;
  const double ends = layers + 1 - spec.has_embedding - spec.has_head;
  double bytes = 2 * ends * nc * s + double(spec.num_blocks) * block_slot_bytes(d, s);
  const double logits = spec.has_head ? s * rows(d) * d.local_vocab() : 0;
  if (spec.has_head) bytes += head_slot_bytes_without_logits(d, s) + logits;
  if (logits_bytes) *logits_bytes = logits;
  return bytes;
}

std::vector<int> peak_live_microbatches(const pipeline::Schedule& schedule, int pp_rank) {
  using pipeline::Op;
  PPTRAIN_CHECK(pp_rank >= 0 && pp_rank < int(schedule.program.size()), "pp rank ", pp_rank);
  std::vector<int> live(schedule.num_stages(), 0), peak(schedule.num_stages(), 0);
  std::map<std::pair<int, int>, bool> holding;  // (stage, mb) -> slot taken
  auto take = [&](int stage, int mb) {
    if (holding[{stage, mb}]) return;
    holding[{stage, mb}] = true;
    peak[stage] = std::max(peak[stage], ++live[stage]);
  };
  for (const pipeline::Action& a : schedule.program[pp_rank]) {
    switch (a.op) {
      case Op::RECV_F: take(a.stage, a.microbatch); break;
      case Op::F:
        take(a.stage, a.microbatch);
        // The executor hands the output to the next stage's input when it sits here too.
        if (a.stage + 1 < schedule.num_stages() && schedule.rank_of(a.stage + 1) == pp_rank)
          take(a.stage + 1, a.microbatch);
        break;
      case Op::B:
      case Op::W:
        if (holding[{a.stage, a.microbatch}]) {
          holding[{a.stage, a.microbatch}] = false;
          --live[a.stage];
        }
        break;
      default: break;  // I keeps the slot; sends and RECV_B use the slot already taken
    }
  }
  return peak;
}

MemoryEstimate estimate_rank_memory(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank, int tp_rank) {
  const std::vector<StageSpec> mine = stages_of(cfg, schedule, pp_rank);
  const ModelDims dims = ModelDims::from(cfg.model, cfg.training.micro_batch_size, cfg.parallel.tp, tp_rank);
  const double p = rank_parameter_count(cfg, mine, tp_rank);
  const std::vector<int> pools = pool_sizes(cfg, schedule, pp_rank);

  double slots = 0, logits = 0;
  int most_live = 0;
  for (const StageSpec& spec : mine) {
    double stage_logits = 0;
    const double slot = stage_slot_bytes(dims, spec, cfg.precision(), &stage_logits);
    slots += double(pools[spec.index]) * (slot - stage_logits);
    logits += double(pools[spec.index]) * stage_logits;
    most_live = std::max(most_live, pools[spec.index]);
  }

  MemoryEstimate e;
  e.items.push_back({"parameters (fp32)", kFp32 * p});
  e.items.push_back({"gradients (fp32)", kFp32 * p});
  e.items.push_back({"AdamW moments (fp32 m and v)", 2 * kFp32 * p});
  if (cfg.precision() == Precision::bf16) e.items.push_back({"bf16 weight copies", kBf16 * p});
  e.items.push_back({cat("activation slots (up to ", most_live, " microbatches of micro_batch_size ",
                         cfg.training.micro_batch_size, " per stage)"),
                     slots});
  if (logits) e.items.push_back({cat("logits [B*T, vocab/tp] of up to ", most_live, " microbatches"), logits});
  e.items.push_back({"token buffers", 2 * kInt32 * double(cfg.parallel.microbatches) * rows(dims)});
  e.items.push_back({"workspace", workspace_bytes(cfg)});
  return e;
}

}  // namespace pptrain
