// Reading a checkpoint into whatever layout the job has now. Each rank reads exactly the
// hyperslabs of its own shards (its TP shard of its stages; DP replicas read theirs too),
// whatever (pp, tp, dp) wrote the file. The file is opened collectively (MPI-IO, its
// metadata read once and shared); the tensor data moves in independent transfers.
//
// Everything that can be wrong with a file is checked before the first transfer, and
// agreed on by all ranks, so every rank fails with the same one-line message: a missing
// file, a file that is not HDF5, a truncated or damaged file, a file that is not a
// pptrain checkpoint (or one of format version 1), root attributes that do not match
// their checksum, a model config that disagrees with the job's, and any dataset that is
// missing, not exactly IEEE float32, of another shape than the model's or without a
// checksum. After the transfers, every dataset's checksum is verified (checksum.h: the
// first holder of each distinct shard hashes what it read, the group sums) and every
// value must be finite; a failure is one line naming the dataset and the file, on every
// rank. The upload callbacks have then already run: the caller must not use the tensors.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/hdf5_handles.h"
#include "checkpoint/io_group.h"
#include "checkpoint/tensor_table.h"
#include "core/config.h"

namespace pptrain {

// Receives host[tensors[index].local_numel()]: the local values of `section` as read
// (elements outside the shard's slabs, i.e. vocabulary padding, are zero).
using UploadFn = std::function<void(Section section, int index, const float* host)>;

// Collective over `io`: opens `path` read-only (MPI-IO when the group has MPI) after the
// existence and format checks above. Throws pptrain::Error on every rank.
h5::File open_checkpoint(const std::string& path, const IoGroup& io);

// Collective: the root attributes of `path` (checked).
CheckpointMeta read_checkpoint_meta(const std::string& path, const IoGroup& io);

// Collective. Checks `path` against `cfg.model` and the tensors, then loads /model into
// every tensor and, when `load_optimizer` and the file has them, /optim/m and /optim/v.
// Returns the file's attributes.
CheckpointMeta read_checkpoint_file(const std::string& path, const std::vector<ShardedTensor>& tensors,
                                    const UploadFn& upload, const Config& cfg, bool load_optimizer,
                                    const IoGroup& io);

}  // namespace pptrain
