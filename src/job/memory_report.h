// MemoryReport: one rank's memory by category, in bytes, printed one way whether it is
// predicted from the config and the lowered schedule (job/memory_estimate.h; what
// `pptrain train --dry-run` prints) or counted from the objects that own the memory of a
// running job (train/measured_memory.h; what the log prints after the first step).
//
// Activations per stage, in the layer contract's terms (DESIGN.md): per microbatch, the
// bytes taken by F and freed by W (the stage's [N,C] inputs/outputs and their gradients, the
// layers' slots), held from F to I and on until W, and the bytes taken by I and freed by W
// (training.recompute: full re-runs the forward at the start of I into them), each times the
// most microbatches holding them at once on the stage, plus the scratch held once (the
// recompute's). So a microbatch holds `from_forward` between F and I and
// `from_forward + from_input` between I and W. The head's logits are listed apart (often
// the largest single consumer).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/config.h"
#include "pipeline/ir.h"

namespace pptrain {

struct StageActivations {
  int stage = 0;            // global stage index
  std::string recompute;    // the stage's training.recompute as its blocks apply it
  double from_forward = 0;  // bytes per microbatch taken by F, freed by W, logits excluded
  int live = 0;             // the most microbatches holding them at once
  double from_input = 0;    // bytes per microbatch taken by I, freed by W
  int live_from_input = 0;  // the most microbatches holding those at once
  double scratch = 0;       // bytes held once, whatever the microbatches
  double held_f_to_i() const { return from_forward; }
  double held_i_to_w() const { return from_forward + from_input; }
};

struct MemoryReport {
  int pp_rank = 0, tp_rank = 0;
  double parameters = 0;   // fp32 masters
  double gradients = 0;    // fp32
  double optimizer = 0;    // AdamW's fp32 m and v
  double bf16_copies = 0;  // training.precision: bf16
  double backup = 0;       // training.post_validation (train/update_backup.h)
  std::vector<StageActivations> stages;  // this rank's, in stage order
  double activations = 0;  // the stages' slots over the program, logits excluded
  double logits = 0;       // the head's [N, VL] dlogits of its live microbatches
  double buffers = 0;      // token buffers, and io buffers of microbatches with sends pending
  double pending_sends = 0;  // the latter part of buffers: an upper bound (memory_estimate.h)
  double other = 0;        // predicted items none of the above names
  std::optional<double> workspace;    // backend scratch outside the allocator (predicted only)
  std::optional<MemoryStats> allocator;  // the backend's own figures (measured only)
  double total() const;  // every category above but the allocator's figures
};

// One line: "pp 0 tp 0: parameters 1.234 MiB | ... | total 9.876 MiB"; sizes in MiB
// (2^20 bytes) with three decimals.
std::string format_memory_report(const MemoryReport& r);

// The prediction of job/memory_estimate.h for (pp_rank, tp_rank), by category; its total
// is the estimate's total.
MemoryReport predicted_memory_report(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank,
                                     int tp_rank);

}  // namespace pptrain
