// The pptrain checkpoint file format (HDF5), version 3.
//
//   /                          attributes below
//   /model/<name>              IEEE float32 (little-endian as written; the reader accepts
//                              exactly binary32 in either byte order and nothing else),
//                              the parameter in its global shape, e.g.
//                              /model/h.3.attn.qkv.weight [3C, C]; /model/wte.weight is
//                              [vocab_size, C]: the rows that pad the vocabulary to a
//                              multiple of tp are not stored
//   /optim/m/<name>            float32, AdamW first moment, same shape (absent when
//   /optim/v/<name>            float32, AdamW second moment   has_optimizer_state = 0)
//
// Every dataset has a `checksum` attribute (uint64): the layout-independent element hash
// of checkpoint/checksum.h over its values plus dataset_binding() of its path and shape.
// Every value is finite and every second moment >= 0: the writer refuses NaN and ±inf,
// and the reader rejects them and negative moments.
//
// Root attributes (strings are fixed-length, NUL-terminated UTF-8; integers 8 bytes):
//   format               "pptrain-checkpoint"
//   format_version       3 (kCheckpointFormatVersion)
//   step                 optimizer steps taken (the next step is step + 1)
//   tokens_seen          training tokens consumed so far (>= data_sequences_seen)
//   data_next_batch      index of the next global batch of the training stream (>= step:
//                        larger after a loss-spike rollback skipped batches)
//   data_sequences_seen  sequences consumed so far (>= step)
//   rng_seed, rng_counter  the RNG state: pptrain's only RNG is counter-based (Philox)
//                        keyed by training.seed; the data stream's counter is the step
//   config               the fully resolved config, YAML text
//   layout_pp_tp_dp      [pp, tp, dp] of the job that wrote the file
//   has_optimizer_state  1 if /optim holds moments (0 for imported weights)
//   writer               "pptrain <version>"
//   lineage              the runs this checkpoint descends from, oldest first, as
//                        "RUN:START/RUN:START/...": RUN a run's 16-hex-digit id, START the
//                        step it started from (0, or the step of the checkpoint it resumed);
//                        the last entry is the run that wrote the file (at most
//                        kMaxLineageRuns entries, older ones dropped)
//   spike_guard          "MEAN COUNT": the loss-spike guard's moving average of the losses and
//                        how many it holds (train/spike_guard.h), so a resumed run goes on
//                        watching at once; "" when none (imports)
//   contents_checksum    checksum_text() of the sorted paths of every link in the file
//                        (contents_text()): the set of groups and datasets, bound to the root
//   meta_checksum        checksum_text() of every attribute above (meta_text())
//
// Files use HDF5's 1.10 format with links and attributes in (checksummed) object headers,
// so HDF5 itself detects damage to the metadata (checkpoint_writer.cpp).
//
// Version 2 (checksums of the values only, no contents_checksum) is still read, with its
// weaker checks. Version 1 (variable-length strings, no checksums, no lineage) is refused
// with one line: its contents cannot be verified, and its strings are what crashed HDF5's
// reader.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pptrain {

inline constexpr const char* kCheckpointFormat = "pptrain-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 3;
inline constexpr int64_t kOldestReadableFormatVersion = 2;
inline constexpr size_t kMaxLineageRuns = 64;

struct CheckpointMeta {
  int64_t format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  int64_t tokens_seen = 0;
  int64_t data_next_batch = 0;
  int64_t data_sequences_seen = 0;
  uint64_t rng_seed = 0;
  int64_t rng_counter = 0;
  std::string config_yaml;
  int64_t layout_pp = 1, layout_tp = 1, layout_dp = 1;
  bool has_optimizer_state = true;
  std::string writer;
  std::string lineage;
  uint64_t contents_checksum = 0;  // version 3
  std::string spike_guard;         // version 3

  // Version 3 binds each dataset's checksum to its name and the set of links to the root.
  bool binds_names() const { return format_version >= 3; }
};

// The text contents_checksum covers: `links` (paths from the root, "/model",
// "/model/wte.weight", ...), sorted, one per line.
std::string contents_text(std::vector<std::string> links);

// The attributes above in one canonical text: what meta_checksum covers.
std::string meta_text(const CheckpointMeta& meta);

// Writes the root attributes (collective under MPI-IO: identical on every rank).
void write_meta(hid_t file, const CheckpointMeta& meta, const std::string& where);
// Reads and checks them: a file that is not a pptrain checkpoint, of a newer format
// version, or whose counters are impossible (negative, or fewer sequences than steps) is a
// pptrain::Error naming `where`.
CheckpointMeta read_meta(hid_t file, const std::string& where);

}  // namespace pptrain
