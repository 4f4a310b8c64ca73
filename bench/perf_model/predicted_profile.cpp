// A cost profile predicted by the performance model, for the planner: what `pptrain profile`
// measures on a GPU (partition/profile.cpp), from predict_step's op calls instead. Bytes are
// counted by the same functions as the job's memory estimate (job/memory_estimate.h), so a
// predicted and a measured profile of one config differ only in their times.
#include "core/error.h"
#include "job/memory_estimate.h"
#include "partition/profile.h"
#include "perf_model.h"

namespace pptrain::bench {
namespace {

// `cfg` with one training.recompute mode for every stage.
Config with_recompute(const Config& cfg, const std::string& mode) {
  Config c = cfg;
  c.training.recompute.every = mode;
  c.training.recompute.per_stage.clear();
  return c;
}

// One layer kind (the stage `spec` holds: the embedding alone, one block, the head alone) as
// the profile's LayerTimer counts it: its slot taken by F (or, under full recompute, a block's
// by I), the output [N,C] and its gradient for every kind but the head, its parameters' fp32
// value and gradient (+ the bf16 copy) and two fp32 AdamW moments.
LayerCost layer_cost(const PassTimes& t, const Config& c, const StageSpec& spec, double transfer_bytes) {
  LayerCost k;
  k.forward_ms = t.f;
  k.input_grad_ms = t.i;
  k.weight_grad_ms = t.w;
  const ModelDims d = ModelDims::from(c, 1, 0, 0);
  const StageSlotBytes slot = stage_slot_bytes(d, spec, c.precision());
  k.act_fi_bytes = 0;
  k.act_iw_bytes = slot.layers + (spec.has_head ? 0.0 : 2 * transfer_bytes);
  k.act_from_input_bytes = slot.layers_from_input;
  const double elements = rank_parameter_count(c, {spec}, 0);
  k.param_bytes = elements * (c.precision() == Precision::bf16 ? 4 + 4 + 2 : 4 + 4);
  k.optim_bytes = elements * (4 + 4);
  return k;
}

}  // namespace

CostProfile predicted_cost_profile(const Config& cfg, const DeviceSpec& dev, const Fractions& f,
                                   const Calibration* cal, const LinkSpec& link) {
  if (!(link.gbytes_per_s > 0) || !(link.latency_ms >= 0))
    fail("perf model: the link needs a bandwidth > 0 GB/s and a latency >= 0 ms");
  const ModelConfig& m = cfg.model;
  CostProfile p = profile_header(cfg, 1);
  p.device = "cuda";  // what the model predicts, whatever device CONFIG names
  const double bytes_per_ms = link.gbytes_per_s * 1e6;
  p.transfer_ms = link.latency_ms + p.transfer_bytes / bytes_per_ms;
  p.allreduce_latency_ms = link.latency_ms;
  p.allreduce_bytes_per_ms = bytes_per_ms;

  const Config none = with_recompute(cfg, "none");
  const StepPrediction plain = predict_step(none, dev, f, cal);
  const StageSpec embedding{0, 0, 0, true, false}, block{0, 0, 1, false, false}, head{0, 0, 0, false, true};
  p.embedding = layer_cost(plain.embedding, none, embedding, p.transfer_bytes);
  p.block = layer_cost(plain.block, none, block, p.transfer_bytes);
  p.head = layer_cost(plain.head, none, head, p.transfer_bytes);
  // training.recompute: attention changes nothing with fused attention (model/dims.h), and
  // with naive attention it is not modelled: the block as it is, so the planner gains
  // nothing by choosing it.
  p.block_attention = p.block;
  const Config full = with_recompute(cfg, "full");
  p.block_full = layer_cost(predict_step(full, dev, f, cal).block, full, block, p.transfer_bytes);
  p.update_ns_per_param = plain.update_ms * 1e6 / step_parameters(m);
  return p;
}

}  // namespace pptrain::bench
