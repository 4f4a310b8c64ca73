// CheckpointManager: the checkpoint policy of a training run (config section
// `checkpoint`), on top of the collective writer and reader.
//
//   dir        where checkpoints go: DIR/step_00001000.h5, and DIR/latest, a one-line
//              text file naming the newest complete checkpoint
//   every      save after every `every` steps (0: only at the end); the last step of a
//              run always saves
//   keep_last  complete checkpoints kept; older ones are removed only after a newer one
//              is complete
//   resume     auto: DIR/latest if there is one (else the newest complete step_*.h5),
//              else start fresh; none: start fresh; PATH: that file (or the latest in
//              that directory), which must exist
//
// A save writes DIR/step_N.h5.tmp collectively, flushes and closes it on every rank,
// then world rank 0 syncs it, renames it to DIR/step_N.h5, and replaces DIR/latest
// atomically (write latest.tmp, rename). A crash at any point leaves the previous
// checkpoint and `latest` as they were; a leftover .tmp is removed by the next save.
//
// Test hook: PPTRAIN_CHECKPOINT_CRASH="STEP:POINT" kills world rank 0 (SIGKILL) while
// saving step STEP, at POINT = file_created | model_written | before_rename.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/io_group.h"
#include "checkpoint/tensor_table.h"
#include "core/config.h"
#include "core/faults.h"
#include "model/optimizer_state.h"
#include "parallel/parallel_context.h"

namespace pptrain {

// The parameters of `params` described for the checkpoint reader and writer.
std::vector<ShardedTensor> sharded_tensors(ParamStore& params);

class CheckpointManager {
 public:
  // `par.world` is the job's world communicator (an MpiComm gives parallel HDF5).
  // `faults`: the planted faults acting on this rank (resume_zero; tests only).
  CheckpointManager(const Config& cfg, const ParallelContext& par, const Faults& faults = {});

  // Collective. Applies checkpoint.resume: loads parameters and optimizer moments.
  // Returns the step resumed from (0 if none); setting it is the caller's business (the
  // data position, LR schedule and RNG counter of pptrain are functions of it).
  int resume(ParamStore& params, OptimizerState& optimizer);
  // Collective. Called after every step: saves when checkpoint.every divides the step,
  // or when `final`; does nothing without checkpoint.dir.
  void after_step(ParamStore& params, OptimizerState& optimizer, int step, bool final);
  // Collective: writes DIR/step_<step>.h5 now (temporary name, rename, latest, pruning)
  // and returns its path.
  std::string save(ParamStore& params, OptimizerState& optimizer, int step);

  // Collective: the file resume() would load ("" for none). Throws pptrain::Error.
  std::string resume_path() const;
  // This rank's part of the most recent save.
  const WriteStats& last_write() const { return last_write_; }

 private:
  CheckpointMeta meta_for(int step) const;
  void plant_load_faults(ParamStore& params, OptimizerState& optimizer) const;

  Config cfg_;
  Faults faults_;
  ParallelContext par_;
  IoGroup io_;
  // What the run resumed from: tokens and sequences seen are counted on from there, so
  // they stay right when the global batch size changes between runs.
  int64_t base_step_ = 0, base_tokens_ = 0, base_sequences_ = 0;
  WriteStats last_write_;
};

}  // namespace pptrain
