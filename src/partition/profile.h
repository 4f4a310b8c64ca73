// Profiling: measures the CostProfile (partition/cost_profile.h) of a config's model on its
// backend and precision, at its micro_batch_size and seq_len, on tp = 1 and, with several
// ranks, on tp = 2, 4, ... (each dividing the ranks and the heads: the ranks in groups of
// tp consecutive ranks, each rank its shard, the tp all-reduces run as in training). A
// config of parallel.tp > 1 is timed at that tp only, as a job's start-up profile is at its
// own tp (ProfileOptions::job_tp_only).
//
// Layer times: F, I and W of stages built with make_stage (the embedding alone, one block
// alone under each training.recompute mode: none, attention, full, the head alone), each
// timed for `repeats` microbatches after `warmup` untimed ones, the kinds taking turns one
// microbatch each (so a drift of the machine's speed reaches every kind alike); the
// median, in ms. All five are built at once. The device finishes each pass before the
// clock is read (Ops::synchronize). Every rank of the profile measures at once and the figures are the
// mean over ranks: the job's ranks compute at the same time, and ranks sharing a node
// (its memory bandwidth and caches) slow each other down. Profile with the ranks per node
// the job will run with.
//
// Update: zeroing, norm and AdamW per element, timed over the model's parameter count
// capped at 4 Mi elements and at least one block's (the optimizer phase of a step scales
// with the parameters a rank holds and streams them from memory).
//
// Bytes: computed from the layers as built (the parameters their ParamStore holds, the
// slot sizes their layers report), not measured from an allocator: see cost_profile.h for
// what each member counts.
//
// Communication, with two ranks or more: one stage tensor (transfer_bytes) between world
// ranks 0 and 1, ping-pong, half the round trip; all-reduces of fp32 buffers over all ranks
// at `allreduce_sizes`, the slowest rank's median per size, fitted by least squares to
// latency + bytes / bandwidth. The transport is the job's: MPI on cpu, NCCL over the same
// ranks on cuda. On one rank transfer_ms is 0 and the all-reduce model the stated defaults
// (kDefaultAllreduce*), allreduce_measured false.
#pragma once
#include <cstddef>
#include <vector>

#include "backend/ops.h"
#include "core/config.h"
#include "parallel/mpi_comm.h"
#include "partition/cost_profile.h"

namespace pptrain {

struct ProfileOptions {
  int warmup = 2;    // untimed microbatches per stage (and per transfer size) first
  int repeats = 10;  // timed ones; the median is kept (parallel.profile_repeats)
  // The layers are timed at the config's parallel.tp (the profile's tp). At tp = 1 on
  // several ranks every larger degree they allow is timed too (other_tp), for the planner
  // to choose among, unless job_tp_only (a job's start-up profile: its prediction uses its
  // own tp only).
  bool job_tp_only = false;
  // Bytes of the all-reduces timed: 64 KiB .. 16 MiB by default.
  std::vector<size_t> allreduce_sizes = {size_t(64) << 10, size_t(256) << 10, size_t(1) << 20, size_t(4) << 20,
                                         size_t(16) << 20};
  // The token ids and targets the layers are timed on, [micro_batch_size · seq_len] each:
  // a microbatch of the job's data (data::profile_sample), since the embedding's wgrad
  // (and the loss) cost depends on how the ids repeat; a corpus that uses few ids makes
  // it several times slower than uniform ids do. Empty: ids uniform over the vocabulary.
  std::vector<int32_t> tokens, targets;
};

// The all-reduce model of a profile taken on one rank, where nothing can be measured:
// round figures for one node (cpu: MPI through shared memory; cuda: NCCL over NVLink),
// to be replaced by a profile over the ranks a job will use.
inline constexpr double kDefaultAllreduceLatencyMs = 0.02;
inline constexpr double kDefaultCpuAllreduceBytesPerMs = 2e6;    // 2 GB/s
inline constexpr double kDefaultCudaAllreduceBytesPerMs = 5e7;   // 50 GB/s

// What a profile is of (its layers measured at `tp`), the stage tensor's size and the
// one-rank communication model (transfer_ms 0, the stated all-reduce defaults); no layer
// measured yet. Also the start of a profile predicted instead (bench/perf_model).
CostProfile profile_header(const Config& cfg, int tp);

// The whole profile. Collective over `world` (every rank calls it; any multiple of the
// config's parallel.tp, whatever the rest of its layout). Throws pptrain::Error for ranks
// that are not a multiple of the tp.
CostProfile profile_costs(const Config& cfg, Ops& ops, MpiComm& world, const ProfileOptions& opts = {});

// The layer costs on this process, no communication: the one-rank profile (transfer_ms 0,
// the default all-reduce model). With `together`, every rank of it calls this at once and
// each layer kind starts after a barrier, so the ranks' measurements overlap.
CostProfile profile_layers(const Config& cfg, Ops& ops, const ProfileOptions& opts = {}, MpiComm* together = nullptr);

// Least-squares fit of `ms[i]` against `bytes[i]`: ms = latency + bytes / rate. A negative
// intercept becomes 0. With no positive slope (time not growing with size: noise, or sizes
// too small to see the bandwidth) the latency is the mean time and the rate the largest
// size over it: pessimistic, at most twice the measured time at that size.
struct AllreduceFit {
  double latency_ms = 0, bytes_per_ms = 0;
};
AllreduceFit fit_allreduce(const std::vector<double>& bytes, const std::vector<double>& ms);

// The median of `v` (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> v);

}  // namespace pptrain
