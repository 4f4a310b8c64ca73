// Preflight: what `pptrain train` checks after parsing the config and before the Job
// allocates the model, so that nothing the config or the file system can tell up front
// fails after minutes of work (or, with checkpoint.every: 0, at the very end of a run).
// One function per concern, in this order:
//   evaluation  training.eval_every > 0 needs data.val
//   data        the token shards of data.train (and data.val when evaluating) open and
//               validate (header, size, one sequence, every token < vocab_size), on the
//               ranks that read them (those of the first and last stage)
//   outputs     checkpoint.dir, and the folders of logging.metrics and logging.trace, are
//               created, take a probe file (created and removed), and have the free space
//               the run will write (checkpoints: see checkpoint_space_needed)
//   memory      the predicted memory of the ranks of each node (job/memory_estimate.h)
//               fits the node's available host memory (cpu backend)
// Every rank checks what it will itself read or write, since ranks on other nodes may see
// other file systems; the verdict is then agreed over the world: when any rank found a
// problem, every rank throws the same pptrain::Error, the first failing rank's line (with
// its rank), so the job ends with one clear line per rank before any model memory exists.
#pragma once
#include <string>

#include "core/config.h"
#include "parallel/mpi_comm.h"
#include "pipeline/ir.h"

namespace pptrain {

// Collective over `world` (the job's world, dp x pp x tp ranks: Job's checked_world).
void run_preflight(const Config& cfg, const pipeline::Schedule& schedule, MpiComm& world);

// The concerns one by one: "" when fine, else the one-line problem (no rank in it).
std::string check_evaluation_data(const Config& cfg);
std::string check_data_shards(const Config& cfg);
// `dir` must be creatable and writable with at least `need_bytes` free.
std::string check_output_dir(const std::string& key, const std::string& dir, double need_bytes);

// Bytes the run's checkpoints need beyond what checkpoint.dir already holds: with E
// complete checkpoints there and S saves to come, at most min(E + S, max(E, keep_last) + 1)
// files exist at once (a new file is complete before the oldest is pruned), E of which are
// already written.
double checkpoint_space_needed(const Config& cfg, int existing_checkpoints);

}  // namespace pptrain
