// What a checkpoint file holds and which rank writes or reads which part of it.
//
// A rank describes the tensors it holds as ShardedTensors: the global shape and the
// slabs (rectangles of the global tensor) its local buffer holds. The same description
// serves the parameters (/model) and the AdamW moments (/optim/m, /optim/v), which share
// the parameter's local layout. build_global_table() exchanges these descriptions over
// the IoGroup so every rank knows every dataset of the file (dataset creation, metadata
// and collective writes need all ranks to take part for each dataset) and who writes:
// for each distinct shard the lowest rank holding it. Copies held by other ranks (tp
// ranks of a replicated tensor, the tied embedding on the last stage, DP replicas other
// than 0) write nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/io_group.h"
#include "model/param.h"

namespace pptrain {

// The three groups of tensors in a checkpoint file.
enum class Section { Model, OptimM, OptimV };
const char* section_group(Section s);  // "/model", "/optim/m", "/optim/v"

struct ShardedTensor {
  std::string name;                   // role name, e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> global_shape;  // 1 or 2 dims
  int64_t local_rows = 0, local_cols = 1;
  std::vector<Slab> slabs;            // where the local [local_rows, local_cols] values sit
  size_t local_numel() const { return size_t(local_rows * local_cols); }
};

// The shape of the local buffer as a dataspace: [local_rows] for 1-D tensors, else
// [local_rows, local_cols].
std::vector<int64_t> local_shape_of(const ShardedTensor& t);

struct TableEntry {
  std::string name;
  std::vector<int64_t> shape;  // global
  std::vector<int64_t> chunk;  // HDF5 chunk shape: the largest writer slab (capped)
  int local = -1;              // index of this rank's ShardedTensor, -1 if it holds none
  bool writes = false;         // this rank writes its slabs of the tensor
  // Transfers per dataset (collective when writing): one per slab, as many as the rank
  // with the most slabs of this tensor has (3 for a fused QKV shard); ranks with fewer
  // join the rest with empty selections. A slab moves between a rectangle of the file
  // and the same rectangle of the local buffer, which HDF5 copies without repacking.
  int transfers = 1;
};

// Collective over `io`. Entries are sorted by name. Throws std::logic_error when the
// ranks disagree on a shape or the writers' slabs do not cover a tensor exactly once.
std::vector<TableEntry> build_global_table(const std::vector<ShardedTensor>& mine, const IoGroup& io);

}  // namespace pptrain
