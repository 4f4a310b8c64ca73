// A roofline performance model of one training step of the cuda backend on one GPU, and its
// memory footprint (bench/gpu_model.cpp prints it; tests/test_gpu_model.cpp checks it).
//
// The view is pp = 1, tp = 1: the whole model on one device, micro_batch_size ×
// microbatches sequences per step. The op list is the step's calls of the backend's ops as
// the layers make them (GPT-2 and the Llama family), each with the FLOPs and bytes
// backend/op_costs.cpp assigns the call, which are what `logging.op_profile` reports: a
// measured profile compares with the prediction op by op, and calibrates it (an efficiency
// per op, measured on one run, predicts another). Uncalibrated, each call's time is the
// larger of FLOPs / (peak · fraction) and bytes / (HBM bandwidth · fraction), with the
// fractions stated below.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/dims.h"
#include "partition/cost_profile.h"

namespace pptrain::bench {

// Peaks of one device: dense (no sparsity) tensor-core bf16, fp32 without tensor cores,
// HBM bandwidth, and the memory a step may fill.
struct DeviceSpec {
  std::string name;
  double bf16_flops;       // FLOP/s
  double fp32_flops;       // FLOP/s
  double hbm_bytes_per_s;  // bytes/s
  double memory_bytes;     // bytes
};

// h100 | h200 | a100; throws pptrain::Error naming the accepted names otherwise.
DeviceSpec device_spec(const std::string& name);

// Fractions of the peaks that kernels achieve (stated, not measured).
struct Fractions {
  double gemm_large = 0.70;  // GEMMs with every dimension ≥ small_gemm_dim (cuBLASLt at scale)
  double gemm_small = 0.35;  // thinner GEMMs: tiles left idle, fewer waves
  double flash = 0.50;       // the handwritten flash attention's share of the tensor peak
  double hbm = 0.80;         // memory-bound kernels (streaming, coalesced)
  int small_gemm_dim = 512;
};

// One line of the table: calls of one backend op in one role (qkv forward, fc1 dgrad, ...),
// summed over the step.
struct OpLine {
  std::string name;
  std::string op;      // the backend op (PPTRAIN_OPS' name, as logging.op_profile names it)
  int count = 0;       // calls per step
  double flops = 0;    // per step
  double bytes = 0;    // per step, read + written
  double ms = 0;       // per step, predicted
  double roofline_ms = 0;  // per step, at the device's peaks (every fraction 1)
  bool compute_bound = false;
};

// Measured efficiencies: per backend op, its roofline time over its measured time in a
// profiled run (fit_calibration). A calibrated prediction times an op's calls at roofline /
// efficiency; ops without one keep the stated fractions.
struct Calibration {
  std::string source;                     // what it was measured on (file, config, device)
  std::map<std::string, double> efficiency;  // op -> (0, 1]
};

// Activation memory of one microbatch on the one stage of a pp = 1 run, as src/model
// allocates it (Block::slot_bytes, Head::slot_bytes, Stage::activation_bytes_per_microbatch).
struct ActivationBytes {
  double block;        // one Block's slot
  double head;         // the Head's slot (logits [N,V] included)
  double stage_io;     // the stage's per-layer inputs and input gradients
  double per_microbatch;
};

struct MemoryBreakdown {
  double params_fp32, grads_fp32, adam_moments, weights_bf16;  // bytes
  ActivationBytes activation;
  double in_flight;    // microbatches whose activations are alive at once (the schedule's peak)
  double activations;  // activation.per_microbatch × in_flight
  double workspace;    // backend scratch: cuBLASLt workspace, the naive attention's buffers
  double peak;         // everything above
};

// Milliseconds of one microbatch's forward (F), input-gradient (I) and weight-gradient (W)
// passes through one layer: the units of a cost profile (partition/cost_profile.h).
struct PassTimes {
  double f = 0, i = 0, w = 0;
};

struct StepPrediction {
  std::vector<OpLine> ops;
  double step_ms = 0;
  // The same time by layer kind and pass (a block's is one block's; full recompute's forward
  // again is in I) and the per-step update (zero, gradient norm, AdamW):
  // step_ms = microbatches · (embedding + n_layer · block + head) + update_ms.
  PassTimes embedding, block, head;
  double update_ms = 0;
  double tokens_per_step = 0, tokens_per_s = 0;
  double flops_per_token = 0;  // bench/model_flops.h: 6N + 6·L·T·C, as llm.c counts
  double mfu = 0;              // tokens_per_s · flops_per_token / bf16 peak
  MemoryBreakdown memory;
};

// The part of one Block's slot that depends on the attention kind, in bytes. `elem` is the
// activation storage size (4 fp32, 2 bf16). naive: probs [B,NH,T,T] of the storage type.
// flash: lse and delta [B,NH,T] fp32 (the T×T matrix is never stored). cudnn: its stats
// [B,NH,T] fp32. One function per the Block's layout of the attention buffers.
double attention_slot_bytes(const std::string& attention, const ModelDims& d, size_t elem);
// One Block's slot (the lists of model/block.h's Gpt2BlockBuffers and model/block_slots.h's
// SlottedBlock): the attention part plus the rest.
double block_slot_bytes(const std::string& attention, const ModelDims& d, size_t elem);
// The whole stage's activation bytes of one microbatch (pp = 1: embedding, blocks, head).
ActivationBytes activation_bytes(const std::string& attention, const ModelDims& d, size_t elem);

// Parameters, gradients, AdamW moments, bf16 copies, activations × the schedule's
// microbatches in flight (the project's simulator at pp = 1), workspace. `params`: every
// parameter of the model (the padded vocabulary included).
MemoryBreakdown memory_breakdown(const Config& cfg, double params, const ModelDims& d, size_t elem);

// Every parameter of the model (tp = 1; bench/model_flops.h's count): what the optimizer
// touches once per step.
double step_parameters(const ModelConfig& m);

// The whole prediction for `cfg` (its model, precision, micro_batch_size, microbatches,
// training.recompute and model.attention) on `dev`; `cal` replaces the fractions of the
// ops it measured.
StepPrediction predict_step(const Config& cfg, const DeviceSpec& dev, const Fractions& f,
                            const Calibration* cal = nullptr);

// The assumptions behind predict_step, one per line, for the program's output.
std::vector<std::string> assumptions(const Config& cfg, const Fractions& f, const Calibration* cal = nullptr);

// ---- a cost profile for the planner (predicted_profile.cpp) ---------------------------------
// The link between two GPUs a predicted profile assumes (stated, not measured): stage
// transfers take latency + bytes / bandwidth, all-reduces the same model (the planner's).
struct LinkSpec {
  double gbytes_per_s = 100;  // GB/s
  double latency_ms = 0.02;
};

// The CostProfile (partition/cost_profile.h) that `pptrain profile` would measure for `cfg`
// at tp = 1 on `dev`, predicted by this model instead: each layer kind's F, I and W per
// microbatch from the step's op calls (predict_step's PassTimes, calibrated by `cal` where
// given), the block again under training.recompute: full (block_full; block_attention is the
// block as it is, as a profile measures it with fused attention), the layer kinds' bytes as
// the job's memory estimate sizes them, the update per parameter from the zero, norm and
// AdamW lines, and the transfers and all-reduces from `link`. The planner (`pptrain plan
// --profile`, parallel.profile) then ranks layouts with the numbers gpu_model prints.
CostProfile predicted_cost_profile(const Config& cfg, const DeviceSpec& dev, const Fractions& f,
                                   const Calibration* cal, const LinkSpec& link);

// ---- against a measured profile (calibration.cpp) ------------------------------------------
// One rank's `logging.op_profile_file` JSON (backend/profiled_ops.cpp: ProfiledOps::json):
// per op the calls, ms, FLOPs and bytes of one step.
struct MeasuredOp {
  std::string op;
  double calls = 0, ms = 0, flops = 0, bytes = 0;
};
struct MeasuredProfile {
  std::string source, backend;
  double step_ms = 0, busy_ms = 0;
  std::vector<MeasuredOp> ops;
};
// Throws pptrain::Error "PATH: ..." naming the key for a file that is not such a profile.
MeasuredProfile read_op_profile(const std::string& path);

// Per op of the profile that the prediction has: the prediction's roofline time over the
// measured time. Ops the model does not list are skipped (they are in the comparison).
Calibration fit_calibration(const StepPrediction& p, const MeasuredProfile& m, const std::string& source);
// The calibration as one JSON object, and back (throws "PATH: ..." on a bad file).
std::string calibration_json(const Calibration& c);
Calibration read_calibration(const std::string& path);

// Prediction against measurement, per backend op: an op taking at least `min_share` of the
// measured step must be within `op_tolerance` (|predicted / measured − 1|), the step within
// `step_tolerance`; calls per step must agree (else the two are different programs), and so
// must the FLOPs and bytes of each op (else the model lists other calls than the run made).
struct OpComparison {
  std::string op;
  double predicted_calls = 0, measured_calls = 0, predicted_ms = 0, measured_ms = 0, share = 0;
  double predicted_flops = 0, measured_flops = 0, predicted_bytes = 0, measured_bytes = 0;
  bool checked = false, within = true, work_agrees = true;
};
struct ProfileComparison {
  std::vector<OpComparison> ops;  // by measured time, longest first; then ops only predicted
  double predicted_step_ms = 0, measured_step_ms = 0;
  bool step_within = false, ops_within = false, calls_agree = false, work_agrees = false;
};
ProfileComparison compare_with_profile(const StepPrediction& p, const MeasuredProfile& m, double op_tolerance = 0.15,
                                       double step_tolerance = 0.10, double min_share = 0.01);

}  // namespace pptrain::bench
