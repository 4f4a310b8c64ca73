// The memory of one rank of a running job by category (job/memory_report.h), counted from
// the objects that own it: parameters, gradients and bf16 copies from the ParamStore, the
// AdamW moments from the optimizer's OptimizerState, each stage's bytes per microbatch
// from the Stage (transfer_bytes, activation_bytes_per_microbatch, layer_slot_bytes) times
// the most microbatches the executed program keeps live (job/memory_estimate.h's replay of
// the lowered program), the token buffers from the microbatch count, and the backend's own
// figures (Ops::memory_stats). Three categories no object it reaches exposes follow the
// prediction's rules: the post-validation backup (a copy of the masters' and gradients'
// arenas and of the moments, train/update_backup.h), the io buffers of microbatches whose
// sends are pending (an upper bound), and the executors' per-microbatch losses.
#pragma once
#include "job/job.h"
#include "job/memory_report.h"
#include "train/adamw.h"

namespace pptrain {

MemoryReport measure_memory_report(Job& job, AdamW& optimizer);

// Collective over the job's world: gathers every rank's report; world rank 0 logs one line
// per (pp, tp) rank (dp replicas hold the same).
void log_memory_reports(Job& job, AdamW& optimizer);

}  // namespace pptrain
