// ProfiledOps: a backend that forwards every call to another and, during the steps it is
// told to profile, times each op with the backend's own clock (Ops::make_op_clock: the
// host clock on cpu, CUDA events on the stream on cuda) and adds up per op: calls, time,
// and the FLOPs and bytes the op's arguments imply (op_costs.cpp), from which the table
// derives GFLOP/s and GB/s. The share of the step the ops were busy (on cuda: the GPU) is
// their summed time over the step's wall time. `logging.op_profile: STEPS` turns it on
// (job/job.cpp wraps the backend; train/run_training.cpp brackets the steps).
//
// Profiling adds two marks per op, no wait: the marks are resolved once, at the end of a
// profiled step. The ops the inner backend calls on itself (a fused op's parts) are not
// seen: the profile is per op of the interface, as the layers call them.
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernel_profile.h"
#include "backend/ops.h"

namespace pptrain {

// The ops of PPTRAIN_OPS, then the memory moves, as one index each.
enum class OpId : int {
#define PPTRAIN_OP_ID(ret, name, params, args) name,
  PPTRAIN_EACH_OP(PPTRAIN_OP_ID)
#undef PPTRAIN_OP_ID
  copy_to_device,
  copy_to_host,
  copy,
  zero,
  prepare_linear_weight,
  count
};
const char* op_name(OpId id);

// What one call of an op computes and moves, from its arguments (op_costs.cpp): FLOPs of
// its multiply-adds (2 per), bytes of the tensors it reads and writes once each. 0 where
// not counted.
struct OpCost {
  double flops = 0, bytes = 0;
};
namespace op_costs {
#define PPTRAIN_OP_COST(ret, name, params, args) OpCost name params;
PPTRAIN_EACH_OP(PPTRAIN_OP_COST)
#undef PPTRAIN_OP_COST
}  // namespace op_costs

class ProfiledOps final : public Ops {
 public:
  explicit ProfiledOps(std::unique_ptr<Ops> inner);
  ~ProfiledOps() override;
  std::string name() const override { return inner_->name(); }
  std::unique_ptr<OpClock> make_op_clock() override { return inner_->make_op_clock(); }

  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* p) override { inner_->release(p); }
  void copy_to_device(void* d, const void* s, size_t n) override;
  void copy_to_host(void* d, const void* s, size_t n) override;
  void copy(void* d, const void* s, size_t n) override;
  void zero(void* p, size_t n) override;
  void synchronize() override { inner_->synchronize(); }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  void hold_weights(int microbatches) override { inner_->hold_weights(microbatches); }
  bool prepare_linear_weight(ConstView w, int rows, int in, int out, bool dgrad) override;

#define PPTRAIN_PROFILED_OP(ret, name, params, args)       \
  ret name params override {                               \
    Timed timed(*this, OpId::name, op_costs::name args);   \
    return inner_->name args;                              \
  }
  PPTRAIN_EACH_OP(PPTRAIN_PROFILED_OP)
#undef PPTRAIN_PROFILED_OP

  // Also records the kernels the device runs for each op call of the profiled steps
  // (logging.kernel_profile; Ops::make_kernel_recorder: cuda's CUPTI). Throws Error on a
  // backend without kernels or where the recorder cannot start (one line).
  void record_kernels();
  const KernelProfile* kernels() const { return recorder_ ? &kernels_ : nullptr; }

  // The ops between begin_step and end_step count; end_step waits for the backend to reach
  // the last mark and adds the step, whose wall time the caller measured around it.
  void begin_step();
  void end_step(double step_ms);

  struct OpStats {
    long long calls = 0;
    double ms = 0, flops = 0, bytes = 0;
  };
  // The last profiled step's calls in issue order: each op's [start, end) in ms from the
  // start of the step's first op, on the backend's clock (device time on cuda).
  struct Call {
    OpId op;
    double start_ms, end_ms;
  };
  const std::vector<Call>& last_step() const { return last_step_; }
  int steps() const { return steps_; }
  double step_ms() const { return step_ms_; }  // summed over the profiled steps
  double busy_ms() const;                      // the ops' summed time
  const std::array<OpStats, size_t(OpId::count)>& stats() const { return stats_; }

  // The table (ops by time, per step) and the JSON document of this rank's profile.
  // `gemm_ceiling_gflops` > 0 adds each op's GFLOP/s as a fraction of it.
  std::string table(int world_rank, double gemm_ceiling_gflops) const;
  std::string json(int world_rank, double gemm_ceiling_gflops) const;

 private:
  struct Timed {
    Timed(ProfiledOps& p, OpId id, OpCost cost);
    ~Timed();
    ProfiledOps& p;
    bool on;
  };
  std::unique_ptr<Ops> inner_;
  std::unique_ptr<OpClock> clock_;
  std::unique_ptr<KernelRecorder> recorder_;
  KernelProfile kernels_;
  bool active_ = false;
  std::vector<std::pair<OpId, OpCost>> calls_;  // this step's, in order
  std::array<OpStats, size_t(OpId::count)> stats_{};
  std::vector<Call> last_step_;
  int steps_ = 0;
  double step_ms_ = 0;
};

}  // namespace pptrain
