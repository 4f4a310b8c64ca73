// Writing one checkpoint file collectively (parallel HDF5 over MPI-IO, or one process
// with the POSIX driver). Every rank takes part in creating every dataset; each writes
// only the hyperslabs it owns (build_global_table), the others join each collective
// write with an empty selection. The file is flushed (MPI_File_sync) and closed before
// this returns; naming it (temporary name, rename) is the CheckpointManager's business.
//
// Failures never split the ranks: every collective HDF5 step (create, each dataset's
// creation and write, flush, close) is followed by an agreement over the io group (a
// small allreduce, IoGroup::agree), and the values of each dataset are checked (finite)
// and hashed (checksum.h) before its creation, agreed the same way. A rank whose step
// failed therefore never leaves the others waiting inside a collective: on an agreed
// failure every rank abandons the file together (rank 0 truncates it, which frees the
// space a full disk needs for HDF5's last metadata writes; every rank closes it; rank 0
// removes it) and throws the same one-line pptrain::Error, naming the file and the
// cause (e.g. "No space left on device"), the lowest failing rank's message.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/io_group.h"
#include "checkpoint/tensor_table.h"

namespace pptrain {

// Fills host[tensors[index].local_numel()] with this rank's local values of `section`.
using DownloadFn = std::function<void(Section section, int index, float* host)>;
// Called on every rank at named points of a write ("file_created", "model_written");
// crash tests kill the job there.
using ProbeFn = std::function<void(const char* point)>;

// Called by every rank as its write enters a collective phase ("writing dataset
// /model/wte.weight") and when the ranks have agreed it is done: the training loop's
// watchdog reads it (runtime/watchdog.h), so a save that makes no progress is caught.
using ProgressFn = std::function<void(const std::string& phase)>;

struct WriteHooks {
  ProbeFn probe;
  ProgressFn progress;
  // Planted fault checkpoint_write_fail (core/faults.h): this rank's write of this
  // dataset ("/model/NAME", "/optim/m/NAME", ...) fails as on a full disk (ENOSPC),
  // after taking part in the collective transfer, as a real failed write does.
  std::string fail_dataset;
  // After an agreed failure the file is closed collectively and removed. HDF5's close
  // flushes its metadata first; when that flush fails on one rank (a disk filled to the last
  // block), that rank skips the flush's collective step and the ranks wait in different
  // collectives for ever. So the close and the barrier after it have this bound: past it,
  // each rank prints the failure it agreed on, in one line, and exits 1.
  double abandon_close_s = 60;
  // Planted fault checkpoint_abandon_desync: this rank leaves that close out.
  bool skip_abandon_close = false;
};

struct WriteStats {
  int64_t bytes = 0;     // tensor bytes this rank wrote
  double seconds = 0;    // wall time of the whole write on this rank
};

// Collective over `io`. Writes /model, and /optim/m and /optim/v when
// meta.has_optimizer_state, plus the root attributes of `meta`. Throws pptrain::Error on
// every rank (the file `path` then no longer exists).
WriteStats write_checkpoint_file(const std::string& path, const std::vector<ShardedTensor>& tensors,
                                 const DownloadFn& download, const CheckpointMeta& meta, const IoGroup& io,
                                 const WriteHooks& hooks = {});

}  // namespace pptrain
