// Which checkpoints of a directory belong to the run that is writing there now.
//
// Every run (one `pptrain train` process group) has a random 64-bit id. A checkpoint's
// `lineage` attribute lists the runs it descends from, oldest first, each with the step
// it started from: "RUN:START/RUN:START/...", the last entry being the run that wrote it.
// A run that resumes from a checkpoint with lineage L at step s has lineage L + "ID:s";
// a run that starts fresh has "ID:0".
//
// The rule (CheckpointManager):
//   1. When a run starts at step s (resumed from s, or fresh at 0) with checkpoint.dir
//      set, every step_N.h5 in checkpoint.dir with N > s belongs to a branch that the run
//      abandons: it is moved, never deleted, into checkpoint.dir/abandoned/ (a name taken
//      there gets a suffix .1, .2, ...), with one warning line. `latest` is rewritten to
//      the checkpoint resumed from when that file is in checkpoint.dir, and removed when it
//      named a moved file otherwise.
//   2. `latest` is only ever written by the run that wrote the checkpoint it names, so
//      resume: auto follows the current lineage.
//   3. keep_last counts, and pruning removes, only checkpoints of the current lineage: a
//      file whose lineage is an ancestor of (or equal to) the run's, written no later
//      than the step at which the run's line left that ancestor. Files of other lineages
//      (and files whose attributes cannot be read) are never pruned.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pptrain {

struct LineageEntry {
  std::string run;  // 16 hex digits
  int64_t start = 0;
  bool operator==(const LineageEntry&) const = default;
};

// Parses "RUN:START/..." ("" gives no entries); nullopt-like: returns false on bad text.
bool parse_lineage(const std::string& text, std::vector<LineageEntry>& out);
std::string lineage_text(const std::vector<LineageEntry>& entries);

// `parent` + (run, start), the oldest entries dropped beyond `max_entries`.
std::string extend_lineage(const std::string& parent, const std::string& run, int64_t start, size_t max_entries);

// Whether a checkpoint of lineage `file` written at `file_step` lies on the line of
// `current` (rule 3 above).
bool in_lineage(const std::string& file, int64_t file_step, const std::string& current);

// A fresh run id: 16 hex digits from the clock, the process id and std::random_device.
std::string new_run_id();

}  // namespace pptrain
