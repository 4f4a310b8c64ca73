#include "partition/profile.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <type_traits>

#include "backend/buffer.h"
#include "core/communicator.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/dims.h"
#include "model/param.h"
#include "model/stage.h"
#include "parallel/device_comm.h"

namespace pptrain {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// count values ~ scale·N(0,1) of the activation type of `precision`, in backend memory
// (a stage's input or output gradient: untyped to the stage's caller).
Buffer<unsigned char> random_tensor(Ops& ops, Precision precision, size_t count, uint64_t stream, float scale) {
  const CounterRng rng(stream, "profile");
  std::vector<float> values(count);  // [count]
  for (size_t i = 0; i < count; ++i) values[i] = scale * rng.normal(i);
  std::vector<unsigned char> bytes;
  if (precision == Precision::bf16) {
    std::vector<bfloat16> half(count);
    for (size_t i = 0; i < count; ++i) half[i] = bfloat16::from_float(values[i]);
    bytes.assign(reinterpret_cast<const unsigned char*>(half.data()),
                 reinterpret_cast<const unsigned char*>(half.data() + count));
  } else {
    bytes.assign(reinterpret_cast<const unsigned char*>(values.data()),
                 reinterpret_cast<const unsigned char*>(values.data() + count));
  }
  Buffer<unsigned char> out(ops, bytes.size());
  out.upload(bytes.data());
  return out;
}

// Token ids [n] in [0, vocab) in backend memory.
Buffer<int32_t> random_ids(Ops& ops, size_t n, int vocab, uint64_t stream) {
  const CounterRng rng(stream, "profile tokens");
  std::vector<int32_t> ids(n);  // [n]
  for (size_t i = 0; i < n; ++i) ids[i] = int32_t(rng.bits(i) % uint64_t(vocab));
  Buffer<int32_t> out(ops, n);
  out.upload(ids.data());
  return out;
}

// One layer kind built as a stage of its own on this rank of the tp group `tp` (its shard;
// its tp all-reduces run as in training), with what its neighbours would hand over:
// time_once() runs one microbatch's F, I and W, cost() gives the medians and the kind's
// bytes. The stages profiled hold one layer each (the embedding, a block, the head).
// `recompute`: the training.recompute mode its blocks run under (the config's own key is
// not read: a profile measures every mode).
class LayerTimer {
 public:
  LayerTimer(const Config& cfg, Ops& ops, const StageSpec& spec, const ProfileOptions& opts, Communicator& tp,
             const std::string& recompute)
      : ops_(ops),
        spec_(spec),
        precision_(cfg.precision()),
        params_(ops, tp.size(), tp.rank(), cfg.training.seed) {
    ModelDims dims = ModelDims::from(cfg.model, cfg.training.micro_batch_size, tp.size(), tp.rank());
    dims.recompute = ModelDims::recompute_of(recompute, dims.fused_attention);
    stage_ = make_stage(params_, dims, spec, tp, precision_);
    if (precision_ == Precision::bf16) params_.refresh_bf16();
    const size_t n = size_t(dims.rows());
    tensor_ = stage_->transfer_bytes();
    // The input [N,C] and the output gradient [N,C] (gradient-sized values), and one
    // microbatch of tokens and targets.
    if (!spec.has_embedding) x_ = random_tensor(ops, precision_, n * dims.d_model, 1, 1.0f);
    if (!spec.has_head) dy_ = random_tensor(ops, precision_, n * dims.d_model, 2, 1e-3f);
    tokens_ = random_ids(ops, n, dims.vocab_size, 3);
    targets_ = random_ids(ops, n, dims.vocab_size, 4);
    if (!opts.tokens.empty()) {
      PPTRAIN_CHECK(opts.tokens.size() == n && opts.targets.size() == n, "profile: ", opts.tokens.size(),
                    " token ids for a microbatch of ", n);
      tokens_.upload(opts.tokens.data());
      targets_.upload(opts.targets.data());
    }
    if (spec.has_head) stage_->set_loss_scale(float(1.0 / double(n)));
  }
  LayerTimer(const LayerTimer&) = delete;  // the stage refers to params_
  LayerTimer& operator=(const LayerTimer&) = delete;

  // One microbatch through F, I and W; its times are kept when `timed` (not in warm-up).
  void time_once(bool timed) {
    const int mb = 0;  // the slot freed by W serves the next repetition: no allocation timed
    const MicrobatchData data{tokens_.data(), targets_.data()};
    if (!spec_.has_embedding) ops_.copy(stage_->input(mb), x_.data(), tensor_);
    ops_.synchronize();
    const auto t0 = Clock::now();
    stage_->forward(mb, data);
    ops_.synchronize();
    const auto t1 = Clock::now();
    if (!spec_.has_head) ops_.copy(stage_->output_grad(mb), dy_.data(), tensor_);
    ops_.synchronize();
    const auto t2 = Clock::now();
    stage_->backward_input(mb);
    ops_.synchronize();
    const auto t3 = Clock::now();
    stage_->backward_weight(mb);
    ops_.synchronize();
    const auto t4 = Clock::now();
    if (!timed) return;
    f_.push_back(ms_between(t0, t1));
    i_.push_back(ms_between(t2, t3));
    w_.push_back(ms_between(t3, t4));
  }

  LayerCost cost() const {
    LayerCost cost;
    cost.forward_ms = median(f_);
    cost.input_grad_ms = median(i_);
    cost.weight_grad_ms = median(w_);
    // Slots are freed whole by W (model/layer.h): nothing is freed by I. A layer's slot is
    // taken by F, or under training.recompute: full a block's by I (its F keeps nothing but
    // the stage's tensors): act_from_input_bytes, which the simulator takes at I.
    // (attention: the probabilities are in no slot, so not here.) The blocks' recompute
    // scratch is one per stage, not per microbatch: not a layer's bytes. Each layer but the
    // head also owns its output [N,C] and that output's gradient, taken by F. I's time
    // above includes the recompute (the forward again at its start).
    cost.act_fi_bytes = 0;
    cost.act_iw_bytes = double(stage_->layer_slot_bytes()) + (spec_.has_head ? 0.0 : 2.0 * double(tensor_));
    cost.act_from_input_bytes = double(stage_->layer_slot_bytes_from_input());
    double elements = 0;
    for (const auto& [name, param] : params_.all()) elements += double(param->numel());
    // fp32 master and gradient (+ the bf16 copy); AdamW's fp32 m and v.
    cost.param_bytes = elements * (precision_ == Precision::bf16 ? 4 + 4 + 2 : 4 + 4);
    cost.optim_bytes = elements * (4 + 4);
    return cost;
  }

 private:
  Ops& ops_;
  StageSpec spec_;
  Precision precision_;
  ParamStore params_;
  std::unique_ptr<Stage> stage_;
  size_t tensor_ = 0;
  Buffer<unsigned char> x_, dy_;      // [N,C] input, [N,C] output gradient
  Buffer<int32_t> tokens_, targets_;  // [N] each
  std::vector<double> f_, i_, w_;     // ms per timed repetition
};

// The mean over the ranks of `world` of each rank's layer times (the bytes are the same on
// every rank: tp shards are equal), on every rank.
void average_over_ranks(MpiComm& world, LayerCost* costs, size_t count) {
  std::vector<double> times;  // [count·3]: F, I, W per layer kind
  for (size_t k = 0; k < count; ++k)
    times.insert(times.end(), {costs[k].forward_ms, costs[k].input_grad_ms, costs[k].weight_grad_ms});
  world.allreduce(times.data(), times.size(), ReduceOp::Sum);
  for (size_t k = 0; k < count; ++k) {
    costs[k].forward_ms = times[3 * k] / world.size();
    costs[k].input_grad_ms = times[3 * k + 1] / world.size();
    costs[k].weight_grad_ms = times[3 * k + 2] / world.size();
  }
}

// Half the median round trip of `bytes` between ranks 0 and 1 of `comm` (world order),
// on every rank of `world`.
double time_transfer(Communicator& comm, Ops& ops, MpiComm& world, size_t bytes, const ProfileOptions& opts) {
  Buffer<unsigned char> buffer(ops, bytes);
  std::vector<double> one_way;
  constexpr int kTag = 1;
  world.barrier();
  for (int rep = 0; rep < opts.warmup + opts.repeats; ++rep) {
    if (world.rank() == 0) {
      const auto t0 = Clock::now();
      comm.isend(buffer.data(), bytes, 1, kTag)->wait();
      comm.irecv(buffer.data(), bytes, 1, kTag)->wait();
      ops.synchronize();  // a receive over NCCL orders only the device (Request::on_device)
      const auto t1 = Clock::now();
      if (rep >= opts.warmup) one_way.push_back(ms_between(t0, t1) / 2);
    } else if (world.rank() == 1) {
      comm.irecv(buffer.data(), bytes, 0, kTag)->wait();
      comm.isend(buffer.data(), bytes, 0, kTag)->wait();
    }
  }
  double ms = world.rank() == 0 ? median(one_way) : 0;
  world.broadcast(&ms, sizeof ms, 0);
  return ms;
}

// The all-reduce model over every rank of `comm`: per size the slowest rank's median.
AllreduceFit time_allreduce(Communicator& comm, Ops& ops, MpiComm& world, const ProfileOptions& opts) {
  std::vector<double> sizes, ms;
  for (size_t bytes : opts.allreduce_sizes) {
    const size_t n = std::max<size_t>(1, bytes / sizeof(float));
    Buffer<float> buffer(ops, n);  // [n], zeros: the sums stay finite
    std::vector<double> times;
    for (int rep = 0; rep < opts.warmup + opts.repeats; ++rep) {
      ops.synchronize();
      world.barrier();  // every rank enters together: the time is the collective's, not the skew
      const auto t0 = Clock::now();
      comm.allreduce(buffer.data(), n, ReduceOp::Sum);
      ops.synchronize();
      const auto t1 = Clock::now();
      if (rep >= opts.warmup) times.push_back(ms_between(t0, t1));
    }
    sizes.push_back(double(n * sizeof(float)));
    ms.push_back(median(times));
  }
  world.allreduce(ms.data(), ms.size(), ReduceOp::Max);
  return fit_allreduce(sizes, ms);
}

}  // namespace

// What a profile is of (its layers measured at `tp`), the stage tensor's size and the
// one-rank communication model; no layer measured yet.
CostProfile profile_header(const Config& cfg, int tp) {
  const ModelConfig& m = cfg.model;
  CostProfile p;
  p.device = cfg.device;
  p.precision = cfg.training.precision;
  p.attention = m.attention;
  p.n_layer = m.n_layer;
  p.micro_batch_size = cfg.training.micro_batch_size;
  p.seq_len = m.seq_len;
  p.d_model = m.d_model;
  p.n_head = m.n_head;
  p.vocab_size = m.vocab_size;
  p.tp = tp;
  const double activation = cfg.precision() == Precision::bf16 ? sizeof(bfloat16) : sizeof(float);
  p.transfer_bytes = double(p.micro_batch_size) * p.seq_len * p.d_model * activation;  // [B·T, C]
  p.transfer_ms = 0;
  p.allreduce_latency_ms = kDefaultAllreduceLatencyMs;
  p.allreduce_bytes_per_ms = cfg.device == "cuda" ? kDefaultCudaAllreduceBytesPerMs : kDefaultCpuAllreduceBytesPerMs;
  p.allreduce_measured = false;
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

AllreduceFit fit_allreduce(const std::vector<double>& bytes, const std::vector<double>& ms) {
  PPTRAIN_CHECK(bytes.size() == ms.size() && !bytes.empty(), "all-reduce fit needs one time per size");
  const double count = double(bytes.size());
  double mean_b = 0, mean_t = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    mean_b += bytes[k] / count;
    mean_t += ms[k] / count;
  }
  double sbb = 0, sbt = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    sbb += (bytes[k] - mean_b) * (bytes[k] - mean_b);
    sbt += (bytes[k] - mean_b) * (ms[k] - mean_t);
  }
  const double slope = sbb > 0 ? sbt / sbb : 0;  // ms per byte
  AllreduceFit fit;
  if (!(slope > 0)) {
    const double largest = *std::max_element(bytes.begin(), bytes.end());
    fit.latency_ms = std::max(mean_t, 0.0);
    fit.bytes_per_ms = fit.latency_ms > 0 ? largest / fit.latency_ms : largest;
    return fit;
  }
  fit.latency_ms = std::max(mean_t - slope * mean_b, 0.0);
  fit.bytes_per_ms = 1 / slope;
  return fit;
}

namespace {

// The elements the update is timed over (8 bytes of moments per element): the model's
// parameters, at most 4 Mi of them (64 MiB of fp32 value, gradient and moments, past any
// cache: a rank's update streams its parameters from memory), and at least one block's.
size_t update_elements(const CostProfile& p) {
  const double block = p.block.optim_bytes / 8,
               model = (p.embedding.optim_bytes + p.n_layer * p.block.optim_bytes + p.head.optim_bytes) / 8;
  return std::max<size_t>(1, size_t(std::max(block, std::min(model, double(size_t(4) << 20)))));
}

// Nanoseconds per element of the trainer's per-step work on a parameter after the flush:
// zero its gradient, add its square to the norm, AdamW-update it (fp32 buffers of `n`).
double time_update(Ops& ops, size_t n, const ProfileOptions& opts) {
  Buffer<float> value(ops, n), grad(ops, n), m(ops, n), v(ops, n);  // [n] each, zeros
  std::vector<double> times;
  for (int rep = 0; rep < opts.warmup + opts.repeats; ++rep) {
    ops.synchronize();
    const auto t0 = Clock::now();
    double norm = ops.sum_squares(grad.data(), n);
    ops.adamw(value.data(), m.data(), v.data(), View(nullptr), value.data(), grad.data(), m.data(), v.data(), n,
              float(1 / (1 + norm)), 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, rep + 1);
    ops.zero(grad.data(), n * sizeof(float));
    ops.synchronize();
    if (rep >= opts.warmup) times.push_back(ms_between(t0, Clock::now()));
  }
  return median(times) * 1e6 / double(n);
}

// The layer kinds on this rank of `tp` (the embedding, the block under each recompute mode,
// the head), each a stage of its own ({index, first block, blocks, embedding, head}). Their
// repetitions are interleaved, one microbatch of each kind in turn: a machine's speed can
// drift by tens of percent within seconds (shared hosts), and a kind timed in one stretch
// would carry that stretch's speed into its median, skewing the kinds against each other;
// interleaved, every kind's median is taken over the same stretches. Ranks measuring
// together (`together`) start each kind's microbatch after a barrier, so their
// measurements overlap.
TpLayerCosts profile_kinds(const Config& cfg, Ops& ops, const ProfileOptions& opts, Communicator& tp,
                           MpiComm* together) {
  PPTRAIN_CHECK(opts.repeats >= 1 && opts.warmup >= 0, "repeats ", opts.repeats, ", warmup ", opts.warmup);
  const StageSpec embedding{0, 0, 0, true, false}, block{1, 0, 1, false, false}, head{2, 1, 0, false, true};
  std::unique_ptr<LayerTimer> timers[5] = {
      std::make_unique<LayerTimer>(cfg, ops, embedding, opts, tp, "none"),
      std::make_unique<LayerTimer>(cfg, ops, block, opts, tp, "none"),
      std::make_unique<LayerTimer>(cfg, ops, block, opts, tp, "attention"),
      std::make_unique<LayerTimer>(cfg, ops, block, opts, tp, "full"),
      std::make_unique<LayerTimer>(cfg, ops, head, opts, tp, "none")};
  for (int rep = 0; rep < opts.warmup + opts.repeats; ++rep)
    for (auto& timer : timers) {
      if (together) together->barrier();
      timer->time_once(rep >= opts.warmup);
    }
  TpLayerCosts out;
  out.tp = tp.size();
  out.embedding = timers[0]->cost();
  out.block = timers[1]->cost();
  out.block_attention = timers[2]->cost();
  out.block_full = timers[3]->cost();
  out.head = timers[4]->cost();
  return out;
}

// The tp degrees measured beside tp = 1 on `world`: 2, 4, ... up to the world size, each
// dividing it and the heads (the layouts `pptrain plan` can choose on these ranks).
std::vector<int> other_tp_degrees(const Config& cfg, int world_size) {
  std::vector<int> out;
  for (int tp = 2; tp <= world_size; tp *= 2)
    if (world_size % tp == 0 && cfg.model.n_head % tp == 0) out.push_back(tp);
  return out;
}

// Refuses a config whose tp the profile would not measure.
void require_tp_one(const Config& cfg) {
  if (cfg.parallel.tp != 1)
    fail(cfg.source, ": key 'parallel.tp': profiling measures tp = 1 only, got ", cfg.parallel.tp,
         " (give parallel.tp=1: run on several ranks, larger degrees are measured beside it)");
}

void set_layers(CostProfile& p, const TpLayerCosts& kinds) {
  p.embedding = kinds.embedding;
  p.block = kinds.block;
  p.head = kinds.head;
  p.block_attention = kinds.block_attention;
  p.block_full = kinds.block_full;
}

// The layer kinds at tp degree `tp` on every rank of `world` at once (groups of tp
// consecutive ranks, as the job's grid places them), the mean over the ranks.
TpLayerCosts layers_at_tp(const Config& cfg, Ops& ops, const ProfileOptions& opts, MpiComm& world, int tp) {
  TpLayerCosts t;
  if (tp == 1) {
    LocalComm alone;
    t = profile_kinds(cfg, ops, opts, alone, &world);
  } else {
    MpiComm group = world.split(world.rank() / tp, world.rank(), cat("tp", tp));
    std::unique_ptr<Communicator> group_nccl =
        cfg.device == "cuda" ? make_device_comm(cfg.parallel.comm, group, ops) : nullptr;
    t = profile_kinds(cfg, ops, opts, group_nccl ? *group_nccl : static_cast<Communicator&>(group), &world);
  }
  LayerCost kinds[5] = {t.embedding, t.block, t.head, t.block_attention, t.block_full};
  average_over_ranks(world, kinds, 5);
  return {tp, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4]};
}

}  // namespace

CostProfile profile_layers(const Config& cfg, Ops& ops, const ProfileOptions& opts, MpiComm* together) {
  require_tp_one(cfg);
  CostProfile p = profile_header(cfg, 1);
  LocalComm alone;
  set_layers(p, profile_kinds(cfg, ops, opts, alone, together));
  if (together) together->barrier();
  p.update_ns_per_param = time_update(ops, update_elements(p), opts);
  return p;
}

CostProfile profile_costs(const Config& cfg, Ops& ops, MpiComm& world, const ProfileOptions& opts) {
  // Every rank measures, all at once: a job's ranks compute at the same time, and ranks
  // that share a node's memory bandwidth and caches slow each other down; a measurement
  // taken alone would predict every step of such a job too fast.
  const int tp = cfg.parallel.tp;
  if (world.size() % tp != 0)
    fail(cfg.source, ": key 'parallel.tp': profiling at tp ", tp, " needs a multiple of ", tp, " ranks, got ",
         world.size());
  CostProfile p = profile_header(cfg, tp);
  world.barrier();
  set_layers(p, layers_at_tp(cfg, ops, opts, world, tp));
  world.barrier();
  p.update_ns_per_param = time_update(ops, update_elements(p), opts);
  world.allreduce(&p.update_ns_per_param, 1, ReduceOp::Sum);
  p.update_ns_per_param /= world.size();
  if (world.size() < 2) return p;
  // The job's transport between these ranks: on GPUs NCCL, or MPI through pinned host buffers
  // (parallel.comm, as the job's groups); MPI on cpus.
  std::unique_ptr<Communicator> nccl = cfg.device == "cuda" ? make_device_comm(cfg.parallel.comm, world, ops) : nullptr;
  Communicator& comm = nccl ? *nccl : static_cast<Communicator&>(world);
  p.transfer_ms = time_transfer(comm, ops, world, size_t(p.transfer_bytes), opts);
  // Larger tp degrees for the planner: every group of tp consecutive ranks at once.
  if (tp == 1 && !opts.job_tp_only)
    for (int other : other_tp_degrees(cfg, world.size())) p.other_tp.push_back(layers_at_tp(cfg, ops, opts, world, other));
  const AllreduceFit fit = time_allreduce(comm, ops, world, opts);
  p.allreduce_latency_ms = fit.latency_ms;
  p.allreduce_bytes_per_ms = fit.bytes_per_ms;
  p.allreduce_measured = true;
  p.allreduce_ranks = world.size();
  return p;
}

}  // namespace pptrain
