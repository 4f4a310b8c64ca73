#include "job/memory_estimate.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "backend/cpu/packed_weights.h"
#include "core/error.h"
#include "model/layer.h"
#include "model/param.h"
#include "partition/partition.h"
#include "pipeline/generators.h"

namespace pptrain {
namespace {

constexpr double kFp32 = 4, kBf16 = 2, kInt32 = 4;
constexpr double kCpuFlashBlock = 64;            // rows per flash tile (backend/cpu/attention_flash.cpp)
constexpr double kCpuRows = 6;                   // rows per micro-tile (backend/cpu/tile_gemm.h)
constexpr double kCublasLtWorkspace = 32 << 20;  // backend/cuda/cuda_lt_gemm.h

// N = B·T rows of a microbatch, without ModelDims::rows()'s int overflow for absurd batches.
double rows(const ModelDims& d) { return double(d.batch) * d.seq_len; }

// Whether the run evaluates (the trainer's rule), and so builds the evaluation's program
// and windows.
bool evaluates(const Config& cfg) {
  return cfg.training.eval_every > 0 && cfg.training.eval_batches > 0 && !cfg.data.val.empty();
}

// One parameter tensor of a block on one tp rank: [rows, cols] (a vector: rows 1), and
// whether it is a linear layer's weight [out, in].
struct BlockTensor {
  size_t rows, cols;
  bool linear_weight;
};
// A block's tensors in the order the block creates them (block_parameter_count below says
// what each is).
std::vector<BlockTensor> block_tensors(const Config& cfg, const ModelDims& d) {
  const size_t c = size_t(d.d_model), tp = size_t(d.tp), cl = size_t(d.local_channels());
  auto vec = [](size_t n) { return BlockTensor{1, n, false}; };
  auto weight = [](size_t out, size_t in) { return BlockTensor{out, in, true}; };
  if (!d.llama)
    return {vec(c), vec(c), weight(3 * c / tp, c), vec(3 * c / tp), weight(c, cl), vec(c), vec(c), vec(c),
            weight(4 * c / tp, c), vec(4 * c / tp), weight(c, 4 * c / tp), vec(c)};
  const size_t qkv_rows = (size_t(cfg.model.n_head) + 2 * size_t(cfg.model.kv_heads())) * size_t(d.head_dim()) / tp;
  const size_t f = size_t(cfg.model.mlp_hidden()) / tp;
  std::vector<BlockTensor> t = {vec(c), weight(qkv_rows, c)};
  if (d.qkv_bias) t.push_back(vec(qkv_rows));
  for (int norm = 0; norm < (d.qk_norm ? 2 : 0); ++norm) t.push_back(vec(size_t(d.head_dim())));  // q, k
  for (const BlockTensor& rest : {weight(c, cl), vec(c), weight(f, c), weight(f, c), weight(c, f)}) t.push_back(rest);
  return t;
}

// Elements of one block's parameters on one tp rank. GPT-2 (C = d_model, tp divides C, 4C
// and the heads): ln_1, ln_2 (weight, bias) replicated; qkv [3C/tp, C] + bias [3C/tp];
// attention proj [C, C/tp] + replicated bias [C]; fc [4C/tp, C] + bias [4C/tp]; mlp proj
// [C, 4C/tp] + replicated bias [C]. Llama family (HD = model.head_dim or C/NH, F =
// ffn_hidden, tp divides the kv heads and F): ln_1, ln_2 [C] replicated; qkv
// [(NH + 2·NKV)·HD/tp, C] (+ its bias under qwen2); proj [C, NH·HD/tp]; gate, up [F/tp, C];
// down [C, F/tp].
double block_parameter_count(const ModelConfig& m, double tp) {
  const double c = m.d_model;
  if (m.llama()) {
    const double hd = m.attention_head_dim(), f = m.mlp_hidden();
    const double qkv_rows = (double(m.n_head) + 2.0 * m.kv_heads()) * hd;
    return 2 * c + qkv_rows / tp * (c + (m.qkv_bias() ? 1 : 0)) + (m.qk_norm() ? 2 * hd : 0) +
           c * (m.n_head * hd / tp) + 3 * (f / tp) * c;
  }
  const double norms = 4 * c;
  const double qkv = 3 * c / tp * c + 3 * c / tp;
  const double proj = c * (c / tp) + c;
  const double fc = 4 * c / tp * c + 4 * c / tp;
  const double fc2 = c * (4 * c / tp) + c;
  return norms + qkv + proj + fc + fc2;
}

// A block's buffers by part (model/layer.h's BlockSlotPart: who reads them after F), as
// Gpt2BlockBuffers and LlamaBlockBuffers list them, with the attention core's lse, delta and
// probs that SlottedBlock adds (model/block_slots.h). N = B·T rows, CL = C/tp, NHL = heads/tp,
// HL = MLP width/tp, QL = (NHL + 2·KVL)·HD; s the storage type's bytes, statistics in fp32:
//   forward    GPT-2: ln1, x2, ln2 [N,C]; attn [N,CL]; gelu [N,HL]; ln_1's and ln_2's mean
//              and rstd [N]. Llama: ln1, x2, ln2 [N,C]; attn [N,CL]; act [N,HL]; two rstd [N];
//              qwen3 also q and k before their norms [N,(NHL + KVL)·HD] and their rstd
//              [N·(NHL + KVL)], the gradients at the norms and a scratch of that size
//   gradients  GPT-2: dln2, dx2, dln1 [N,C]; dqkv [N,3CL]; dfc1 [N,HL]. Llama: dln2, dx2,
//              dln1 [N,C]; dqkv [N,QL]; dgate, dup [N,HL]
//   transient  GPT-2: qkv [N,3CL]; fc1 [N,HL]; dattn [N,CL]. Llama: qkv [N,QL]; gate, up,
//              dact [N,HL]; dattn [N,CL]. Both, fused attention only: lse, delta [B,NHL,T] fp32
//   probs      naive attention only: [B,NHL,T,T]
struct BlockPartBytes {
  double forward = 0, gradients = 0, transient = 0, probs = 0;
};
BlockPartBytes block_part_bytes(const ModelDims& d, double s) {
  const double n = rows(d), c = d.d_model, cl = d.local_channels(), hl = d.local_hidden();
  const double t = d.seq_len, heads = double(d.batch) * d.local_heads();
  const double qkv = d.llama ? double(d.local_qkv()) : 3 * cl;
  BlockPartBytes b;
  if (d.llama) {
    b.forward = s * n * (3 * c + cl + hl) + kFp32 * 2 * n;
    b.gradients = s * n * (3 * c + qkv + 2 * hl);
    b.transient = s * n * (qkv + 3 * hl + cl);
    if (d.qk_norm) {  // the q and k heads before their norms, rstd per head; at their outputs; scratch
      const double qk = double(d.local_heads() + d.local_kv_heads()) * d.head_dim();
      b.forward += s * n * qk + kFp32 * n * (d.local_heads() + d.local_kv_heads());
      b.gradients += s * n * qk;
      b.transient += s * n * qk;
    }
  } else {
    b.forward = s * n * (3 * c + cl + hl) + kFp32 * 4 * n;
    b.gradients = s * n * (3 * c + qkv + hl);
    b.transient = s * n * (qkv + hl + cl);
  }
  if (d.fused_attention)
    b.transient += kFp32 * 2 * heads * t;
  else
    b.probs = s * heads * t * t;
  return b;
}

// One block's bytes where training.recompute places them (model/layer.h's
// block_slot_placement): per microbatch from F, per microbatch from I, and the scratch.
struct BlockBytes {
  double from_forward = 0, from_input = 0, scratch = 0;
};
BlockBytes block_bytes(const ModelDims& d, double s) {
  const BlockPartBytes p = block_part_bytes(d, s);
  const BlockSlotPlacement placement = block_slot_placement(d.recompute);
  auto sum = [&p](unsigned parts) {
    return (parts & kForwardPart ? p.forward : 0) + (parts & kGradientPart ? p.gradients : 0) +
           (parts & kTransientPart ? p.transient : 0) + (parts & kProbsPart ? p.probs : 0);
  };
  return {sum(placement.at_forward), sum(placement.at_input), sum(placement.scratch)};
}

// The head's slot without its logits: h, dh [N,C] in the storage type; mean, rstd [N] and
// the row statistics [3N] in fp32; the summed loss (one double).
double head_slot_bytes_without_logits(const ModelDims& d, double s) {
  const double n = rows(d), c = d.d_model;
  return s * 2 * n * c + kFp32 * 5 * n + sizeof(double);
}

double storage_bytes(Precision p) { return p == Precision::bf16 ? kBf16 : kFp32; }

std::vector<StageSpec> stages_of(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank) {
  std::vector<StageSpec> mine;
  for (const StageSpec& spec : stage_specs(cfg))
    if (schedule.rank_of(spec.index) == pp_rank) mine.push_back(spec);
  return mine;
}

// The per-stage peaks of live microbatches, the larger of training and evaluation.
LivePeaks pool_sizes(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank) {
  LivePeaks peak = peak_live_microbatches(schedule, pp_rank);
  if (evaluates(cfg)) {
    const LivePeaks eval = peak_live_microbatches(pipeline::make_forward_only(schedule), pp_rank);
    for (size_t s = 0; s < peak.io.size(); ++s) {  // (sends: evaluation's are a subset)
      peak.io[s] = std::max(peak.io[s], eval.io[s]);
      peak.layers[s] = std::max(peak.layers[s], eval.layers[s]);
    }
  }
  return peak;
}

// The bytes of the cpu backend's packed copies of the linear layers' weights
// (backend/cpu/packed_weights.h), where this process packs them and a window runs enough rows
// through a weight (the trainer's: a step's microbatches, an evaluation's batches of them):
// each weight [out, in] in its forward and its dgrad layout. oneDNN's blocked layouts pad
// both dimensions to their blocks (at most 64 elements: BA16a64b and the like), so
// 4·⌈out⌉₆₄·⌈in⌉₆₄ bytes per layout bound each copy (the test of MemPeakOfTheFirstStep
// checks the copies held after a step against it).
double packed_weight_bytes(const Config& cfg, const std::vector<StageSpec>& mine, const ModelDims& d) {
  if (cfg.device != "cpu" || !cpu::PackedWeights::why_not().empty()) return 0;
  const double window_rows = rows(d) * cfg.parallel.microbatches;
  const double eval_rows = evaluates(cfg) ? window_rows * cfg.training.eval_batches : 0;
  if (std::max(window_rows, eval_rows) < double(cpu::PackedWeights::kMinRows)) return 0;
  auto padded = [](double n) { return std::ceil(n / 64) * 64; };
  auto copies = [&](double out, double in) { return 2 * kFp32 * padded(out) * padded(in); };
  double block = 0;
  for (const BlockTensor& t : block_tensors(cfg, d))
    if (t.linear_weight) block += copies(double(t.rows), double(t.cols));
  double bytes = 0;
  for (const StageSpec& spec : mine)
    bytes += spec.num_blocks * block + (spec.has_head ? copies(d.local_vocab(), d.d_model) : 0);  // the logits' product, tied or not
  return bytes;
}

// cpu: each OpenMP thread's attention scratch, as large as the backward's (the larger pass):
// the plain path's vᵀ, k, q, dO [T,HD] and dS [T,T], then a packed panel [T,kRows]; the flash
// path's kᵀ, vᵀ, k, q, dO and the dK, dV sums [T,HD], P and dS [64,T] and a panel [64,kRows]
// (backend/cpu/attention.cpp, attention_flash.cpp); and the packed weight copies.
// cuda: the cuda backend's workspaces, each grown to its largest use and kept
// (backend/cuda/cuda_ops.h): cuBLASLt's (at most 32 MiB); under model.attention: naive, the
// attention backward's head-major q, dO, dQ [B,NH,T,HD], k, v, dK, dV [B,NKV,T,HD] and score
// gradients [B,NH,T,T] in the storage type, each padded to 256 bytes (cuda_gemm.cpp; the
// forward takes less); the column sums' partials, 2 x ⌈N/64⌉ x the widest row summed (a
// layernorm's C, a bias's width; kernels/column_sum.cuh), or the embedding gradient's sort
// in the same buffer, (⌈VL/32⌉·⌈N/256⌉ + 1 + 2N) int32 (kernels/embedding.cu); the rotary
// table, T·HD fp32; the reductions' result and partials, 256 bytes + 1,024 doubles at most
// (kernels/sum_squares.cu). The emulated backend's test checks a run's workspaces against it
// (test_memory_accounting).
double cuda_workspace_bytes(const Config& cfg, const ModelDims& d) {
  const double n = rows(d), t = d.seq_len, hd = d.head_dim(), storage = storage_bytes(cfg.precision());
  auto padded = [&](double elems) { return std::ceil(elems * storage / 256) * 256; };
  double attention = 0;
  if (cfg.model.attention == "naive") {
    const double q = padded(d.batch * d.local_heads() * t * hd), kv = padded(d.batch * d.local_kv_heads() * t * hd);
    attention = 3 * q + 4 * kv + padded(d.batch * d.local_heads() * t * t);
  }
  double widest = d.llama ? d.d_model : 2.0 * d.d_model;  // RMSNorm's one sum a column, layernorm's two
  if (!d.llama) widest = std::max(widest, 4.0 * d.d_model / d.tp);  // GPT-2's biases: qkv 3C/tp, fc 4C/tp
  if (d.qkv_bias) widest = std::max(widest, double(d.local_qkv()));
  const double column_sums = std::ceil(n / 64) * widest * kFp32;
  const double embedding_sort = (std::ceil(double(d.local_vocab()) / 32) * std::ceil(n / 256) + 1 + 2 * n) * kInt32;
  const double rotary = d.llama ? t * hd * kFp32 : 0;
  return kCublasLtWorkspace + attention + std::max(column_sums, embedding_sort) + rotary + 256 + 1024 * 8;
}

double workspace_bytes(const Config& cfg, const std::vector<StageSpec>& mine, const ModelDims& d) {
  if (cfg.device == "cuda") return cuda_workspace_bytes(cfg, d);
  const double t = cfg.model.seq_len, hd = d.head_dim();
  const bool fused = cfg.model.attention == "flash" || cfg.model.attention == "cudnn";
  const double per_thread = fused ? 7 * hd * t + 2 * kCpuFlashBlock * t + kCpuRows * kCpuFlashBlock
                                  : 4 * hd * t + t * t + kCpuRows * t;
  return double(omp_get_max_threads()) * per_thread * kFp32 + packed_weight_bytes(cfg, mine, d);
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
  // wte [V,C], wpe [T,C] (gpt2), the blocks, ln_f [C] weight and bias (llama: weight); the
  // LM head is tied to wte or has lm_head [V,C] of its own.
  const double wpe = m.llama() ? 0 : double(m.seq_len) * c, ln_f = m.llama() ? c : 2 * c;
  const double head = m.tie_embeddings ? 0 : double(m.vocab_size) * c;
  return double(m.vocab_size) * c + wpe + double(m.n_layer) * block_parameter_count(m, 1) + ln_f + head;
}

double rank_parameter_count(const Config& cfg, const std::vector<StageSpec>& my_stages, int tp_rank) {
  const ModelDims d = ModelDims::from(cfg.model, cfg.training.micro_batch_size, cfg.parallel.tp, tp_rank);
  const double c = d.d_model, tp = d.tp;
  double count = 0;
  bool has_wte = false;
  for (const StageSpec& spec : my_stages) {
    count += double(spec.num_blocks) * block_parameter_count(cfg.model, tp);
    if (spec.has_embedding && !d.llama) count += double(d.seq_len) * c;  // wpe, replicated
    if (spec.has_head) count += d.llama ? c : 2 * c;                       // ln_f
    has_wte = has_wte || spec.has_embedding || (spec.has_head && d.tie_embeddings);
    if (spec.has_head && !d.tie_embeddings) count += double(d.local_vocab()) * c;  // lm_head [Vp/tp, C]
  }
  if (has_wte) count += double(d.local_vocab()) * c;  // [Vp/tp, C], one tensor per rank
  return count;
}

bool tied_embedding_shared(const Config& cfg) { return cfg.model.tie_embeddings && cfg.total_stages() > 1; }

FlatLayout rank_flat_layout(const Config& cfg, const std::vector<StageSpec>& my_stages, int tp_rank) {
  const ModelDims d = ModelDims::from(cfg.model, cfg.training.micro_batch_size, cfg.parallel.tp, tp_rank);
  const size_t c = size_t(d.d_model), vocab = size_t(d.local_vocab());
  const std::vector<BlockTensor> block = block_tensors(cfg, d);
  std::vector<std::vector<size_t>> buckets;  // one per stage, then the shared one
  std::vector<int> stages;
  bool has_wte = false;
  for (const StageSpec& spec : my_stages) {
    std::vector<size_t> n;
    for (int b = 0; b < spec.num_blocks; ++b)
      for (const BlockTensor& t : block) n.push_back(t.rows * t.cols);
    if (spec.has_embedding && !d.llama) n.push_back(size_t(d.seq_len) * c);  // wpe
    if (spec.has_head) n.insert(n.end(), d.llama ? 1 : 2, c);                 // ln_f
    if (spec.has_head && !d.tie_embeddings) n.push_back(vocab * c);          // lm_head
    // wte: in the bucket of the first stage using it, unless it is shared (Job).
    const bool uses_wte = spec.has_embedding || (spec.has_head && d.tie_embeddings);
    if (uses_wte && !has_wte && !tied_embedding_shared(cfg)) n.push_back(vocab * c);
    has_wte = has_wte || uses_wte;
    buckets.push_back(std::move(n));
    stages.push_back(spec.index);
  }
  if (has_wte && tied_embedding_shared(cfg)) {
    buckets.push_back({vocab * c});
    stages.push_back(-1);
  }
  return flat_layout_of(buckets, cfg.parallel.dp, stages);
}

double checkpoint_tensor_bytes(const ModelConfig& m) { return 3 * kFp32 * global_parameter_count(m); }

StageSlotBytes stage_slot_bytes(const ModelDims& d, const StageSpec& spec, Precision precision) {
  const double s = storage_bytes(precision), nc = rows(d) * d.d_model;
  StageSlotBytes out;
  // The stage's acts[i] and grads[i] [N,C] for i = 0..L over its L layers, but for the
  // ends the embedding (tokens in) and the head (loss out) do not need.
  const double layers = double(spec.num_blocks) + spec.has_embedding + spec.has_head;
  out.io = 2 * (layers + 1 - spec.has_embedding - spec.has_head) * nc * s;
  const BlockBytes block = block_bytes(d, s);
  out.layers = double(spec.num_blocks) * block.from_forward;
  out.layers_from_input = double(spec.num_blocks) * block.from_input;
  out.scratch = spec.num_blocks > 0 ? block.scratch : 0;  // one, shared by the stage's blocks
  if (spec.has_head) {
    out.logits = s * rows(d) * d.local_vocab();
    out.layers += head_slot_bytes_without_logits(d, s) + out.logits;
  }
  return out;
}

LivePeaks peak_live_microbatches(const pipeline::Schedule& schedule, int pp_rank) {
  using pipeline::Op;
  PPTRAIN_CHECK(pp_rank >= 0 && pp_rank < int(schedule.program.size()), "pp rank ", pp_rank);
  const size_t stages = size_t(schedule.num_stages());
  // One pool: which (stage, mb) hold a slot, how many per stage now and at most.
  struct Pool {
    std::set<std::pair<int, int>> held;
    std::vector<int> live, peak;
    void take(int stage, int mb) {
      if (held.insert({stage, mb}).second) peak[stage] = std::max(peak[stage], ++live[stage]);
    }
    void free(int stage, int mb) {
      if (held.erase({stage, mb})) --live[stage];
    }
  };
  Pool io{{}, std::vector<int>(stages), std::vector<int>(stages)}, layers = io, after_input = io;
  std::vector<int> sends(stages, 0);
  for (const pipeline::Action& a : schedule.program[pp_rank]) {
    switch (a.op) {
      case Op::RECV_F: io.take(a.stage, a.microbatch); break;
      case Op::F:
        io.take(a.stage, a.microbatch);
        layers.take(a.stage, a.microbatch);
        // The executor hands the output over to the next stage's input when it sits here too.
        if (a.stage + 1 < int(stages) && schedule.rank_of(a.stage + 1) == pp_rank) io.take(a.stage + 1, a.microbatch);
        break;
      case Op::I: after_input.take(a.stage, a.microbatch); break;
      case Op::B:  // I and W in one: its slots from I are live for a moment
        after_input.take(a.stage, a.microbatch);
        [[fallthrough]];
      case Op::W:
        io.free(a.stage, a.microbatch);
        layers.free(a.stage, a.microbatch);
        after_input.free(a.stage, a.microbatch);
        break;
      case Op::SEND_F:
      case Op::SEND_B: sends[a.stage] = 1; break;
      default: break;  // RECV_B uses the slots already taken
    }
  }
  return {io.peak, layers.peak, after_input.peak, sends};
}

MemoryEstimate estimate_rank_memory(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank, int tp_rank) {
  const std::vector<StageSpec> mine = stages_of(cfg, schedule, pp_rank);
  const ModelDims dims = ModelDims::from(cfg.model, cfg.training.micro_batch_size, cfg.parallel.tp, tp_rank);
  const double p = rank_parameter_count(cfg, mine, tp_rank);
  const LivePeaks pools = pool_sizes(cfg, schedule, pp_rank);

  double slots = 0, logits = 0, pending = 0;
  int most_live = 0;
  for (const StageSpec& spec : mine) {
    // The stage's own training.recompute.
    const StageSlotBytes slot =
        stage_slot_bytes(ModelDims::from(cfg, cfg.parallel.tp, tp_rank, spec.index), spec, cfg.precision());
    const int io = pools.io[spec.index], kept = pools.layers[spec.index];
    slots += io * slot.io + kept * (slot.layers - slot.logits) +
             pools.after_input[spec.index] * slot.layers_from_input + slot.scratch;
    pending += pools.sends[spec.index] * slot.io;
    logits += kept * slot.logits;
    most_live = std::max({most_live, io, kept, pools.after_input[spec.index]});
  }

  // Masters, gradients and bf16 copies live in arenas padded to dp equal ranges
  // (ParamStore::flatten); ZeRO-1 keeps the moments of one range: 8/dp bytes per parameter
  // instead of 8, and under bf16 the fp32 masters of that range only (4/dp instead of 4;
  // under fp32 the layers compute with the masters, so they stay whole).
  const FlatLayout arena = rank_flat_layout(cfg, mine, tp_rank);
  const bool zero = cfg.zero_shards_moments(), sharded_masters = cfg.zero_shards_masters();
  const double moments = zero ? 2 * kFp32 * double(arena.shard_size) : 2 * kFp32 * p;
  const double masters = kFp32 * double(sharded_masters ? arena.shard_size : arena.total());
  MemoryEstimate e;
  e.items.push_back({sharded_masters ? "parameters (fp32 masters of the ZeRO-1 range)"
                                     : "parameters (fp32 masters, whole: the arena)",
                     masters});
  e.items.push_back({"gradients (fp32 arena)", kFp32 * double(arena.total())});
  e.items.push_back({zero ? "AdamW moments (fp32 m and v of the ZeRO-1 range)" : "AdamW moments (fp32 m and v)",
                     moments});
  if (cfg.precision() == Precision::bf16)
    e.items.push_back({"bf16 weight copies (arena, whole)", kBf16 * double(arena.total())});
  if (cfg.training.post_validation)
    e.items.push_back({"post-validation backup (fp32 masters, gradients, m and v)",
                       masters + kFp32 * double(arena.total()) + moments});
  e.items.push_back({cat("activation slots (", most_live, " microbatch(es) of micro_batch_size ",
                         cfg.training.micro_batch_size, " live per stage at most)"),
                     slots});
  if (logits) e.items.push_back({cat("logits [B*T, vocab/tp] of ", most_live, " microbatch(es)"), logits});
  if (pending) e.items.push_back({"io buffers of microbatches with sends pending", pending});
  e.items.push_back({"token buffers", 2 * kInt32 * double(cfg.parallel.microbatches) * rows(dims)});
  // The executors' (training and evaluation) summed loss per microbatch, where the head
  // writes them (runtime/executor.h), on the rank of the last stage.
  const bool last = std::any_of(mine.begin(), mine.end(), [](const StageSpec& s) { return s.has_head; });
  if (last) e.items.push_back({"microbatch losses (training and evaluation)", 2 * 8.0 * cfg.parallel.microbatches});
  e.items.push_back({"workspace", workspace_bytes(cfg, mine, dims)});
  return e;
}

LivePeaks live_microbatch_pools(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank) {
  return pool_sizes(cfg, schedule, pp_rank);
}

}  // namespace pptrain
