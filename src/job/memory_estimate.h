// The memory one rank of a training job will allocate, predicted from the config and the
// lowered schedule alone (nothing is allocated), so that a model that cannot fit is refused
// before the Job builds it. What is counted, per rank (P = parameters this rank holds: the
// local tp shards of its stages, the tied token embedding once per rank):
//   parameters        fp32 masters, 4·P bytes (the arenas below pad P to kFlatAlign per
//                     tensor and to dp equal ranges); under ZeRO-1 with bf16, the masters
//                     of the rank's range only, 4·P/dp (under fp32 the layers compute with
//                     the masters, so they stay whole)
//   gradients         fp32, 4·P
//   AdamW moments     fp32 m and v, 8·P; under ZeRO-1 those of the rank's range, 8·P/dp
//   bf16 copies       2·P under training.precision: bf16 (whole, ZeRO-1 or not)
//   backup            masters + gradients + moments again under training.post_validation
//                     (train/update_backup.h)
//   activation slots  per stage, the buffers one microbatch keeps until its W (the stage's
//                     [N,C] inputs/outputs and their gradients, every block's slot, the
//                     head's; under training.recompute: full the blocks' slots are taken
//                     by I, not F, and counted with the peak between I and W; the blocks'
//                     shared recompute scratch once) times the most microbatches ever live in that pool: slot
//                     pools keep freed slots for reuse, so a pool holds its peak live count
//                     for the rest of the run. The peaks are read off the lowered program
//                     (and off the forward-only evaluation program, which keeps all m
//                     microbatches until the end of the batch)
//   logits            the head's [N,VL] dlogits, part of the head's slot, listed apart
//                     because it is often the largest single consumer
//   token buffers     tokens and targets [B·T] int32 for each of the m microbatches
//   workspace         cpu: one attention scratch per OpenMP thread (the backward's: [T,T] +
//                     4·[T,HD] fp32 for naive attention, [2·64,T] + 7·[T,HD] for flash) and,
//                     where the process packs the linear layers' weights (a window of at
//                     least PackedWeights::kMinRows rows), their two packed layouts (about
//                     8 bytes per weight element); cuda: the cuBLASLt workspace (32 MiB),
//                     naive attention's head-major copies and score gradients ([B,NH,T,T]),
//                     the column sums' partials, the rotary table
//   pending sends     the executor frees a microbatch's io buffers only once its sends
//                     completed (polled, never blocking): one more io slot for each stage
//                     that sends to another rank, an upper bound when sends complete before
//                     the next microbatch arrives
// Not counted: the process itself (libraries, MPI buffers), allocator rounding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/dims.h"
#include "model/stage.h"
#include "pipeline/ir.h"

namespace pptrain {

struct MemoryItem {
  std::string what;  // "activation slots (4 microbatches on stage 0)"
  double bytes = 0;  // exact for integers below 2^53; no overflow for absurd configs
};

struct MemoryEstimate {
  std::vector<MemoryItem> items;
  double total() const;
  const MemoryItem& largest() const;
  // The bytes of the item whose name starts with `prefix` (0 if none).
  double bytes_of(const std::string& prefix) const;
};

// Elements of the global model (unsharded, unpadded vocabulary): what a checkpoint holds.
double global_parameter_count(const ModelConfig& m);

// Elements this rank holds: its tp shard of every parameter of its stages.
double rank_parameter_count(const Config& cfg, const std::vector<StageSpec>& my_stages, int tp_rank);
// Whether the tied token embedding sits in a bucket of its own in the flat arenas: with
// more than one stage its gradient is complete only after the first and the last stage
// (and, across pp ranks, the embedding group's all-reduce), so it cannot go with either
// stage's bucket. With one stage it is in that stage's bucket.
bool tied_embedding_shared(const Config& cfg);
// The flat layout of the parameter arenas of those stages on tp rank `tp_rank` (model/param.h:
// one bucket per stage, in the order given, then the shared one), as the Job lays them out.
FlatLayout rank_flat_layout(const Config& cfg, const std::vector<StageSpec>& my_stages, int tp_rank);

// Bytes of one checkpoint file's tensors: fp32 parameters and the two fp32 AdamW moments.
double checkpoint_tensor_bytes(const ModelConfig& m);

// Bytes one microbatch keeps on `spec`'s stage, storage type `precision`, in the two pools
// that hold them: the stage's own [N,C] inputs/outputs and their gradients (`io`), and the
// slots of its layers taken by F (`layers`: every block's, the head's) and taken by I
// (`layers_from_input`: the blocks' under training.recompute: full); `logits` is the head's
// [N,VL] part of `layers`. `scratch`: bytes held once, not per microbatch (the recompute
// scratch the stage's blocks share).
struct StageSlotBytes {
  double io = 0, layers = 0, logits = 0, layers_from_input = 0, scratch = 0;
};
StageSlotBytes stage_slot_bytes(const ModelDims& dims, const StageSpec& spec, Precision precision);

// The most microbatches live at once on each stage of `pp_rank` over the lowered program
// ([num_stages] each; 0 for stages elsewhere). In the stage's io pool a microbatch is live
// from the first action that needs its input buffer (RECV_F posts the receive into it, the
// previous stage's F on the same rank hands its output over, or its own F) until its W or
// B; in its layers' pools from its F until its W or B. `sends`: the stage sends to another
// rank (SEND_F or SEND_B), so the executor may keep a microbatch's io buffers past its W
// until the send completed. `after_input`: the layer slots taken by I (or B) and freed by W
// (or B): training.recompute: full's.
struct LivePeaks {
  std::vector<int> io, layers, after_input, sends;
};
LivePeaks peak_live_microbatches(const pipeline::Schedule& schedule, int pp_rank);

// The pools the prediction sizes on `pp_rank`: peak_live_microbatches of the training
// program, and of the forward-only evaluation program where the config evaluates.
LivePeaks live_microbatch_pools(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank);

// The prediction for world rank coordinates (pp_rank, tp_rank) of `cfg` under `schedule`.
MemoryEstimate estimate_rank_memory(const Config& cfg, const pipeline::Schedule& schedule, int pp_rank,
                                    int tp_rank);

}  // namespace pptrain
