#include "job/memory_report.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "job/memory_estimate.h"
#include "model/dims.h"
#include "partition/partition.h"

namespace pptrain {
namespace {

std::string mib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f MiB", bytes / double(1 << 20));
  return buf;
}

}  // namespace

double MemoryReport::total() const {
  return parameters + gradients + optimizer + bf16_copies + backup + activations + logits + buffers + other +
         workspace.value_or(0);
}

std::string format_memory_report(const MemoryReport& r) {
  std::string stages;
  for (const StageActivations& s : r.stages)
    stages += cat(stages.empty() ? "" : "; ", "stage ", s.stage, " (recompute ", s.recompute, "): held per microbatch F->I ",
                  mib(s.held_f_to_i()), ", I->W ", mib(s.held_i_to_w()), "; ", s.live, " live",
                  s.from_input ? cat(" (", s.live_from_input, " from I)") : std::string(),
                  s.scratch ? cat(" + scratch ", mib(s.scratch)) : std::string());
  std::string line = cat("pp ", r.pp_rank, " tp ", r.tp_rank, ": parameters ", mib(r.parameters), " | gradients ",
                         mib(r.gradients), " | optimizer ", mib(r.optimizer), " | bf16 copies ", mib(r.bf16_copies),
                         " | backup ", mib(r.backup), " | activations ", mib(r.activations), " (", stages,
                         ") | logits ", mib(r.logits), " | buffers ", mib(r.buffers),
                         " (pending sends ", mib(r.pending_sends), ")");
  if (r.other) line += cat(" | other ", mib(r.other));
  if (r.workspace) line += cat(" | workspace ", mib(*r.workspace));
  line += cat(" | total ", mib(r.total()));
  if (r.allocator)
    line += cat(" | allocator: in use ", mib(double(r.allocator->in_use)), ", peak ", mib(double(r.allocator->peak)),
                ", reserved ", mib(double(r.allocator->reserved)), "; outside it ",
                mib(double(r.allocator->outside)));
  return line;
}

MemoryReport predicted_memory_report(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank,
                                     int tp_rank) {
  const MemoryEstimate e = estimate_rank_memory(cfg, schedule, pp_rank, tp_rank);
  MemoryReport r;
  r.pp_rank = pp_rank;
  r.tp_rank = tp_rank;
  r.parameters = e.bytes_of("parameters");
  r.gradients = e.bytes_of("gradients");
  r.optimizer = e.bytes_of("AdamW moments");
  r.bf16_copies = e.bytes_of("bf16 weight copies");
  r.backup = e.bytes_of("post-validation backup");
  r.activations = e.bytes_of("activation slots");
  r.logits = e.bytes_of("logits");
  r.pending_sends = e.bytes_of("io buffers");
  r.buffers = e.bytes_of("token buffers") + e.bytes_of("microbatch losses") + r.pending_sends;
  r.workspace = e.bytes_of("workspace");
  // Whatever the estimate counts under another name still reaches the total.
  r.other = std::max(0.0, e.total() - r.total());

  // The per-microbatch figures the activations item is made of (memory_estimate.h).
  const LivePeaks live = live_microbatch_pools(cfg, schedule, pp_rank);
  for (const StageSpec& spec : stage_specs(cfg)) {
    if (schedule.rank_of(spec.index) != pp_rank) continue;
    const ModelDims dims = ModelDims::from(cfg, cfg.parallel.tp, tp_rank, spec.index);  // the stage's recompute
    const StageSlotBytes slot = stage_slot_bytes(dims, spec, cfg.precision());
    r.stages.push_back({spec.index, recompute_name(dims.recompute), slot.io + slot.layers - slot.logits,
                        std::max(live.io[spec.index], live.layers[spec.index]), slot.layers_from_input,
                        live.after_input[spec.index], slot.scratch});
  }
  return r;
}

}  // namespace pptrain
