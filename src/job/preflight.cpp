#include "job/preflight.h"

#include <fcntl.h>
#include <mpi.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "data/token_dataset.h"
#include "job/host_memory.h"
#include "job/memory_estimate.h"

namespace pptrain {
namespace {

namespace fs = std::filesystem;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// HDF5 bytes beyond the tensors of one checkpoint: an object header and its layout message
// per dataset (a few hundred bytes; 4 KiB allowed), and the attributes (the resolved config
// as text, the writer's layout; 1 MiB allowed).
constexpr double kDatasetOverhead = 4096, kFileOverhead = 1 << 20;
// Upper bounds on what one JSON line of the metrics file and one Chrome trace event take.
constexpr double kMetricsLineBytes = 512, kTraceEventBytes = 256;

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / kGiB);
  return text;
}

// A file size in the largest unit that keeps it >= 1 (bytes, KiB, MiB, GiB, TiB), three
// significant digits: a small output folder's need is not "0.01 GiB", nor its free space.
std::string size_text(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024) bytes /= 1024, ++u;
  char text[32];
  if (u == 0) std::snprintf(text, sizeof text, "%.0f bytes", bytes);
  else std::snprintf(text, sizeof text, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return text;
}

// When any rank has a problem, every rank throws the line of the lowest failing rank.
void agree(MpiComm& world, const std::string& problem) {
  double first = -(problem.empty() ? double(world.size()) : double(world.rank()));  // max of -rank = min rank
  world.allreduce(&first, 1, ReduceOp::Max);
  const int root = int(-first);
  if (root >= world.size()) return;
  uint64_t length = problem.size();
  world.broadcast(&length, sizeof length, root);
  std::string line = world.rank() == root ? problem : std::string(length, '\0');
  world.broadcast(line.data(), length, root);
  if (world.size() == 1) fail(line);
  fail(line, " (found by rank ", root, ")");
}

// Checkpoints: complete step_*.h5 files already in `dir`.
int existing_checkpoints(const std::string& dir) {
  std::error_code ec;
  int count = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("step_") && name.ends_with(".h5")) ++count;
  }
  return count;
}

// Saves a run of training.steps steps makes: one every checkpoint.every steps, and the last.
int checkpoint_saves(const Config& cfg) {
  const int steps = cfg.training.steps, every = cfg.checkpoint.every;
  if (every <= 0) return 1;
  return steps / every + (steps % every != 0 ? 1 : 0);
}

double checkpoint_file_bytes(const Config& cfg) {
  // Per block 12 tensors (gpt2) or 7 (llama: two norms, qkv, proj, gate, up, down); wte,
  // ln_f weight and bias (llama: weight only), wpe (gpt2), lm_head when untied; each as
  // model, m and v.
  const ModelConfig& m = cfg.model;
  const double per_block = m.llama() ? 7 : 12, others = m.llama() ? 2 : 4;
  const double datasets = 3.0 * (per_block * m.n_layer + others + (m.tie_embeddings ? 0 : 1));
  return checkpoint_tensor_bytes(cfg.model) + datasets * kDatasetOverhead + kFileOverhead;
}

// The folder `path` (a file) goes to; "." for a bare file name.
std::string folder_of(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// An output file path must not name a folder.
std::string check_output_file(const std::string& key, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return cat(key, ": '", path, "' is a directory (expected a file name)");
  return "";
}

std::string check_outputs(const Config& cfg, const pipeline::Schedule& schedule, int world_rank, int world_size,
                          int pp_rank) {
  const double steps = cfg.training.steps;
  if (!cfg.checkpoint.dir.empty()) {
    // Every rank writes its hyperslabs of the checkpoint file (parallel HDF5).
    const int existing = existing_checkpoints(cfg.checkpoint.dir);
    std::string p = check_output_dir("checkpoint.dir", cfg.checkpoint.dir, checkpoint_space_needed(cfg, existing));
    if (!p.empty()) return p;
  }
  if (!cfg.logging.metrics.empty() && world_rank == 0) {  // rank 0 alone writes the metrics
    const int eval_every = cfg.training.eval_every;
    const double lines = steps / cfg.logging.every + 2 + (eval_every > 0 ? steps / eval_every : 0);
    std::string p = check_output_file("logging.metrics", cfg.logging.metrics);
    if (p.empty()) p = check_output_dir("logging.metrics", folder_of(cfg.logging.metrics), lines * kMetricsLineBytes);
    if (!p.empty()) return p;
  }
  if (!cfg.logging.trace.empty()) {
    // Every rank writes its part (an event per action and step, and the optimizer's); rank 0
    // then joins all parts into the trace before removing them.
    const double events = steps * (double(schedule.program[pp_rank].size()) + 1);
    const double need = events * kTraceEventBytes * (world_rank == 0 ? 2.0 * world_size : 1.0);
    std::string p = check_output_file("logging.trace", cfg.logging.trace);
    if (p.empty()) p = check_output_dir("logging.trace", folder_of(cfg.logging.trace), need);
    if (!p.empty()) return p;
  }
  return "";
}

// The ranks of this node, for their shared host memory.
MpiComm node_comm(const MpiComm& world) {
  MPI_Comm node;
  if (MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node) != MPI_SUCCESS)
    fail("MPI_Comm_split_type failed (rank ", world.rank(), ")");
  return MpiComm(node, "node", /*owned=*/true);
}

std::string check_device_memory(const MemoryEstimate& mine, MpiComm& node) {
  const std::optional<CudaDeviceInfo> gpu = cuda_device_info();
  // Every rank of the node takes part in the gather, with device -1 when it has none.
  const std::vector<double> all =
      node.allgather(std::vector<double>{gpu ? double(gpu->device) : -1.0, mine.total()});
  if (!gpu) return "";
  double together = 0;
  int sharing = 0;
  for (size_t r = 0; r + 1 < all.size(); r += 2)
    if (all[r] == double(gpu->device)) {
      together += all[r + 1];
      ++sharing;
    }
  if (together <= gpu->total_bytes) return "";
  const MemoryItem& largest = mine.largest();
  const std::string needs = sharing > 1 ? cat("the ", sharing, " ranks on it need an estimated ", gib(together),
                                              " together (this rank ", gib(mine.total()), "; ")
                                        : cat("this rank needs an estimated ", gib(together), " (");
  return cat("memory: GPU ", gpu->device, " of this node has ", gib(gpu->total_bytes), ", but ", needs,
             "largest: ", largest.what, ", ", gib(largest.bytes),
             "); reduce the model, training.micro_batch_size or parallel.microbatches, or use more GPUs");
}

std::string check_memory(const Config& cfg, const pipeline::Schedule& schedule, MpiComm& world) {
  const int tp = cfg.parallel.tp, pp = cfg.parallel.pp;
  const int pp_rank = world.rank() / tp % pp, tp_rank = world.rank() % tp;
  const MemoryEstimate mine = estimate_rank_memory(cfg, schedule, pp_rank, tp_rank);
  MpiComm node = node_comm(world);
  double node_total = mine.total();
  node.allreduce(&node_total, 1, ReduceOp::Sum);
  // The cuda backend keeps all but a few host buffers on the GPU. Ranks that share one
  // (several ranks on a one-GPU node, parallel.comm: mpi) divide its memory: their
  // estimates together must fit the device.
  if (cfg.device != "cpu") return check_device_memory(mine, node);
  const MemoryItem& largest = mine.largest();
  auto refusal = [&](const std::string& needs, const HostMemory& host) {
    return cat("memory: ", needs, " (largest: ", largest.what, ", ", gib(largest.bytes), "), but ",
               gib(host.available_bytes), " of host memory is available (", host.source,
               "); reduce the model, training.micro_batch_size or parallel.microbatches, or use more ranks");
  };
  const std::string rank_needs = cat("this rank needs an estimated ", gib(mine.total()));
  if (auto process = address_space_headroom(); process && mine.total() > process->available_bytes)
    return refusal(rank_needs, *process);
  const std::optional<HostMemory> node_memory = available_host_memory();
  if (!node_memory || node_total <= node_memory->available_bytes) return "";
  const std::string ranks = node.size() > 1 ? cat(", the ", node.size(), " ranks of this node ", gib(node_total)) : "";
  return refusal(rank_needs + ranks, *node_memory);
}

}  // namespace

std::string check_evaluation_data(const Config& cfg) {
  const TrainingConfig& t = cfg.training;
  if (cfg.data.val.empty() && t.eval_every > 0 && t.eval_batches > 0)
    return cat(cfg.source, ": data.val is empty but training.eval_every is ", t.eval_every,
               " (set data.val to a glob of validation shards, or training.eval_every: 0 to train without evaluation)");
  return "";
}

std::string check_data_shards(const Config& cfg) {
  try {
    if (cfg.data.train.empty()) return cat(cfg.source, ": key 'data.train': a glob of token shards is required");
    // Every token is read once here; the trainer's datasets then check only their headers
    // and what each read returns.
    data::TokenDataset(cfg.data.train, cfg.model.seq_len, cfg.model.vocab_size, "data.train").check_all_tokens();
    const TrainingConfig& t = cfg.training;
    if (!cfg.data.val.empty() && t.eval_every > 0 && t.eval_batches > 0)
      data::TokenDataset(cfg.data.val, cfg.model.seq_len, cfg.model.vocab_size, "data.val").check_all_tokens();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string check_output_dir(const std::string& key, const std::string& dir, double need_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return cat(key, ": cannot create directory '", dir, "': ", ec.message());
  if (!fs::is_directory(dir, ec)) return cat(key, ": '", dir, "' is not a directory");
  // A probe file proves writing works (permissions, read-only mounts, pseudo file systems).
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  const std::string probe = (fs::path(dir) / cat(".pptrain-probe.", host, ".", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return cat(key, ": cannot write in '", dir, "': ", std::strerror(errno));
  const bool wrote = ::write(fd, "p", 1) == 1;
  const int write_errno = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) return cat(key, ": cannot write in '", dir, "': ", std::strerror(write_errno));
  struct statvfs fsinfo;
  if (::statvfs(dir.c_str(), &fsinfo) != 0)
    return cat(key, ": cannot query free space of '", dir, "': ", std::strerror(errno));
  const double free_bytes = double(fsinfo.f_bavail) * double(fsinfo.f_frsize);
  if (free_bytes < need_bytes)
    return cat(key, ": '", dir, "' has ", size_text(free_bytes), " free, but the run will write up to ",
               size_text(need_bytes));
  return "";
}

double checkpoint_space_needed(const Config& cfg, int existing) {
  const int saves = checkpoint_saves(cfg);
  const int at_once = std::min(existing + saves, std::max(existing, cfg.checkpoint.keep_last) + 1);
  return std::max(0, at_once - existing) * checkpoint_file_bytes(cfg);
}

void run_preflight(const Config& cfg, const pipeline::Schedule& schedule, MpiComm& world) {
  const std::string evaluation = check_evaluation_data(cfg);  // the same on every rank
  if (!evaluation.empty()) fail(evaluation);

  // Only the ranks of the first and last stage read tokens (the trainer's rule).
  const int pp_rank = world.rank() / cfg.parallel.tp % cfg.parallel.pp;
  const bool reads_data = schedule.rank_of(0) == pp_rank || schedule.rank_of(cfg.total_stages() - 1) == pp_rank;
  agree(world, reads_data ? check_data_shards(cfg) : "");
  agree(world, check_outputs(cfg, schedule, world.rank(), world.size(), pp_rank));
  agree(world, check_memory(cfg, schedule, world));
}

}  // namespace pptrain
