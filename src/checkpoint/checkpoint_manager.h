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
// checkpoint and `latest` as they were; a leftover .tmp is removed by the next save. A
// save that fails (a full disk, a non-finite value) fails on every rank with one line,
// removes its .tmp and leaves the previous checkpoint and `latest` as they were.
//
// Lineage (lineage.h): resume() starts this run's line; checkpoints of the directory
// after the step it starts from are moved into DIR/abandoned/, and keep_last prunes
// only checkpoints of the current line. Names step_*.h5 that do not parse are ignored
// with a warning.
//
// Planted faults (core/faults.h): checkpoint_crash@RANK:POINT:STEP kills the rank (SIGKILL)
// while saving step STEP, at POINT = file_created | model_written | before_rename;
// freeze_save@RANK:POINT stops it there (SIGSTOP); checkpoint_write_fail fails a write;
// checkpoint_abandon_desync leaves that failed file's collective close out on a rank.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/dir_lock.h"
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
  // Whether after_step saves at `step`.
  bool due(int step, bool final) const;
  // Collective: writes DIR/step_<step>.h5 now (temporary name, rename, latest, pruning)
  // and returns its path.
  std::string save(ParamStore& params, OptimizerState& optimizer, int step);

  // Collective, for a loss spike (train/spike_guard.h): loads the newest checkpoint of
  // checkpoint.dir (parameters and moments), as resume() would, within the same run (no
  // new lineage, nothing moved aside). Returns its step and path; the caller sets the
  // trainer's step and then the data offset (set_data_offset) past the spike's batches.
  struct Rollback {
    int step;
    std::string path;
  };
  Rollback rollback(ParamStore& params, OptimizerState& optimizer);
  // Collective, for comparing layouts step by step (`train --dump DIR --step-from REF`):
  // loads the parameters and moments of `dir`'s checkpoint of `step` (the name save() gives
  // it) into this run as resume() would, within the run (no lineage, nothing moved aside,
  // the run's step and data position unchanged). Fails unless the file holds that step.
  void load_step_state(const std::string& dir, int step, ParamStore& params, OptimizerState& optimizer);
  // Global batches skipped by rollbacks: the trainer reads batch step + offset at step + 1,
  // and a checkpoint stores data_next_batch = step + offset, which resume() restores.
  int64_t data_offset() const { return data_offset_; }
  void set_data_offset(int64_t offset) { data_offset_ = offset; }
  // The loss-spike guard's state (train/spike_guard.h): what the next save stores, and what
  // the last resume or rollback loaded ("" when the checkpoint has none).
  void set_spike_guard(std::string state) { spike_guard_ = std::move(state); }
  const std::string& loaded_spike_guard() const { return loaded_spike_guard_; }

  // Collective: the file resume() would load ("" for none). Throws pptrain::Error.
  std::string resume_path() const;
  // This rank's part of the most recent save.
  const WriteStats& last_write() const { return last_write_; }
  // Where a save reports its phases ("checkpoint save: writing dataset ..."), for
  // the watchdog; none by default.
  void set_progress(ProgressFn progress) { progress_ = std::move(progress); }

 private:
  // Collective: reads `path` into the parameters and moments (checked; resume_zero faults).
  CheckpointMeta load(const std::string& path, ParamStore& params, OptimizerState& optimizer);
  // Counts tokens, sequences and skipped batches on from `meta`.
  void continue_from(const CheckpointMeta& meta);
  CheckpointMeta meta_for(int step) const;
  // Collective: a new run id, the run's lineage from `parent_lineage` at step `start`,
  // and, with `move_aside`, rule 1 of lineage.h (`resumed`: the file resumed from, "" if
  // none).
  void start_lineage(const std::string& parent_lineage, int64_t start, const std::string& resumed, bool move_aside);
  // Rank 0, after `newest` is complete: keep_last within the lineage.
  void prune(const std::filesystem::path& newest) const;
  void plant_load_faults(ParamStore& params, OptimizerState& optimizer) const;

  Config cfg_;
  Faults faults_;
  ParallelContext par_;
  IoGroup io_;
  // What the run resumed from: tokens and sequences seen are counted on from there, so
  // they stay right when the global batch size changes between runs.
  int64_t base_step_ = 0, base_tokens_ = 0, base_sequences_ = 0;
  int64_t data_offset_ = 0;
  std::string spike_guard_, loaded_spike_guard_;
  WriteStats last_write_;
  ProgressFn progress_;
  DirLock dir_lock_;  // world rank 0, from resume() on
  std::string run_id_, lineage_;  // set by resume() or the first save
};

}  // namespace pptrain
