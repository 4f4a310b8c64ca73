// Writing one checkpoint file collectively (parallel HDF5 over MPI-IO, or one process
// with the POSIX driver). Every rank takes part in creating every dataset; each writes
// only the hyperslabs it owns (build_global_table), the others join each collective
// write with an empty selection. The file is flushed (MPI_File_sync) and closed before
// this returns; naming it (temporary name, rename) is the CheckpointManager's business.
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

struct WriteStats {
  int64_t bytes = 0;     // tensor bytes this rank wrote
  double seconds = 0;    // wall time of the whole write on this rank
};

// Collective over `io`. Writes /model, and /optim/m and /optim/v when
// meta.has_optimizer_state, plus the root attributes of `meta`. Throws pptrain::Error.
WriteStats write_checkpoint_file(const std::string& path, const std::vector<ShardedTensor>& tensors,
                                 const DownloadFn& download, const CheckpointMeta& meta, const IoGroup& io,
                                 const ProbeFn& probe = {});

}  // namespace pptrain
