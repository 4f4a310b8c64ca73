#include "train/measured_memory.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "job/memory_estimate.h"
#include "model/dims.h"

namespace pptrain {
namespace {

// The mode stage `stage`'s blocks run under (sent to rank 0 as a number with the report).
int recompute_of_stage(Job& job, int stage) {
  return int(ModelDims::from(job.config(), job.parallel().tp, job.parallel().tp_rank, stage).recompute);
}

}  // namespace

MemoryReport measure_memory_report(Job& job, AdamW& optimizer) {
  const Config& cfg = job.config();
  const ParallelContext& par = job.parallel();
  MemoryReport r;
  r.pp_rank = par.pp_rank;
  r.tp_rank = par.tp_rank;
  // The arenas of the flattened store, padding included (under sharded masters the
  // masters' holds the rank's range only).
  ParamStore& params = job.params();
  r.parameters = double(params.value_arena_size() * sizeof(float));
  r.gradients = double(params.grad_arena_size() * sizeof(float));
  r.bf16_copies = double(params.bf16_arena_size() * sizeof(bfloat16));
  r.optimizer = double(optimizer.state().bytes());
  // UpdateBackup: a second set of buffers for the masters, gradients, m and v.
  if (cfg.training.post_validation) r.backup = r.parameters + r.gradients + r.optimizer;

  const ModelDims dims = ModelDims::from(cfg.model, cfg.training.micro_batch_size, par.tp, par.tp_rank);
  const LivePeaks live = live_microbatch_pools(cfg, job.schedule(), par.pp_rank);
  for (const auto& stage : job.stages()) {
    const StageSpec& spec = stage->spec();
    const double transfer = double(stage->transfer_bytes()), slots = double(stage->layer_slot_bytes());
    // training.recompute: full takes part of the blocks' slots at I (model/layer.h).
    const double from_input = double(stage->layer_slot_bytes_from_input()), scratch = double(stage->scratch_bytes());
    // activation_bytes_per_microbatch counts an [N,C] tensor and its gradient at both ends
    // of the stage; the first stage has none before its embedding, the last none after its
    // head (nothing is allocated there).
    const double io = double(stage->activation_bytes_per_microbatch()) - slots - from_input -
                      2 * transfer * (int(spec.has_embedding) + int(spec.has_head));
    // The head's dlogits [N, VL] in the storage type: part of its slot, listed apart.
    const double storage = stage->precision() == Precision::bf16 ? sizeof(bfloat16) : sizeof(float);
    const double logits = spec.has_head ? storage * double(dims.rows()) * dims.local_vocab() : 0.0;
    const int io_live = live.io[spec.index], slot_live = live.layers[spec.index];
    const int input_live = live.after_input[spec.index];
    const Recompute mode = ModelDims::from(cfg, par.tp, par.tp_rank, spec.index).recompute;
    r.stages.push_back({spec.index, recompute_name(mode), io + slots - logits, std::max(io_live, slot_live), from_input,
                        input_live, scratch});
    r.activations += io * io_live + (slots - logits) * slot_live + from_input * input_live + scratch;
    r.logits += logits * slot_live;
    r.pending_sends += io * live.sends[spec.index];
  }
  // The trainer's tokens and targets [B·T] int32 of every microbatch, and on the rank of the
  // last stage its two executors' (training, evaluation) summed loss per microbatch
  // (runtime/executor.h, the trainer's, whose objects this report does not reach).
  const bool last = std::any_of(job.stages().begin(), job.stages().end(),
                                [](const auto& stage) { return stage->spec().has_head; });
  r.buffers += r.pending_sends + 2.0 * sizeof(int32_t) * double(cfg.parallel.microbatches) * dims.rows() +
               (last ? 2.0 * sizeof(double) * cfg.parallel.microbatches : 0.0);
  r.allocator = job.ops().memory_stats();
  return r;
}

void log_memory_reports(Job& job, AdamW& optimizer) {
  const MemoryReport mine = measure_memory_report(job, optimizer);
  const int per_stage = 7, stages = job.config().parallel.stages_per_rank;
  // [kFixed + 7·stages_per_rank] per rank (every rank holds stages_per_rank stages):
  // coordinates, categories, the allocator's figures, then per stage its activations.
  constexpr int kFixed = 16;
  std::vector<double> packed = {double(mine.pp_rank),
                                double(mine.tp_rank),
                                double(job.parallel().dp_rank),
                                mine.parameters,
                                mine.gradients,
                                mine.optimizer,
                                mine.bf16_copies,
                                mine.backup,
                                mine.activations,
                                mine.logits,
                                mine.buffers,
                                mine.pending_sends,
                                double(mine.allocator->in_use),
                                double(mine.allocator->peak),
                                double(mine.allocator->reserved),
                                double(mine.allocator->outside)};
  PPTRAIN_CHECK(int(packed.size()) == kFixed && int(mine.stages.size()) == stages, "memory report of ",
                mine.stages.size(), " stages");
  for (const StageActivations& s : mine.stages)
    packed.insert(packed.end(), {double(s.stage), s.from_forward, double(s.live), s.from_input,
                                 double(s.live_from_input), s.scratch, double(recompute_of_stage(job, s.stage))});
  const size_t size = packed.size();
  const std::vector<double> all = job.world().allgather(std::move(packed));
  if (job.world().rank() != 0) return;
  log::info("memory per rank after the first step (counted from the job's buffers; activations x the live "
            "microbatches of the program):");
  for (size_t at = 0; at + size <= all.size(); at += size) {
    const double* v = &all[at];
    if (v[2] != 0) continue;  // dp replicas hold what dp rank 0 holds
    MemoryReport r;
    r.pp_rank = int(v[0]);
    r.tp_rank = int(v[1]);
    r.parameters = v[3];
    r.gradients = v[4];
    r.optimizer = v[5];
    r.bf16_copies = v[6];
    r.backup = v[7];
    r.activations = v[8];
    r.logits = v[9];
    r.buffers = v[10];
    r.pending_sends = v[11];
    r.allocator = MemoryStats{size_t(v[12]), size_t(v[13]), size_t(v[14]), size_t(v[15])};
    for (int s = 0; s < stages; ++s) {
      const double* st = v + kFixed + per_stage * s;
      r.stages.push_back({int(st[0]), recompute_name(Recompute(int(st[6]))), st[1], int(st[2]), st[3], int(st[4]),
                          st[5]});
    }
    log::info("  ", format_memory_report(r));
  }
}

}  // namespace pptrain
