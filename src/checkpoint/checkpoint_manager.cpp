#include "checkpoint/checkpoint_manager.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/lineage.h"
#include "core/log.h"
#include "core/version.h"

namespace pptrain {
namespace fs = std::filesystem;

namespace {

const char* kLatest = "latest";

std::string checkpoint_name(int step) {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08d.h5", step);
  return name;
}

// The step of a checkpoint's file name step_<digits>.h5; nullopt for any other name, and
// a one-line warning for a step_*.h5 whose number does not parse (letters, or a number
// beyond the int steps pptrain counts in).
std::optional<int64_t> step_of(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.size() < 8 || name.rfind("step_", 0) != 0 || name.substr(name.size() - 3) != ".h5") return std::nullopt;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size() - 3;
  int step = 0;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || first == last || *first == '-' || *first == '+') {
    log::warn("checkpoint: ignoring ", path.string(), ": not a checkpoint name step_<step>.h5 with a step of at most ",
              INT32_MAX);
    return std::nullopt;
  }
  return step;
}

// Complete checkpoints in `dir` as (step, path), newest (highest step) first.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (auto step = step_of(entry.path())) out.push_back({*step, entry.path()});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// fsync of a file or directory: the data, or the directory entry of a rename, reaches
// the disk before the next step of the protocol.
std::string sync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return cat("cannot open '", path.string(), "' to sync it");
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? "" : cat("fsync of '", path.string(), "' failed");
}

// The checkpoint to resume from in `dir` (rank 0 only): what `latest` names, else the
// newest complete step_*.h5, else "".
std::string latest_in(const fs::path& dir, std::string& error) {
  const fs::path pointer = dir / kLatest;
  std::error_code ec;
  if (fs::exists(pointer, ec)) {
    std::ifstream in(pointer);
    std::string name;
    std::getline(in, name);
    name.erase(name.find_last_not_of(" \t\r\n") + 1);
    if (name.empty() || name.find('/') != std::string::npos) {
      error = cat("checkpoint: ", pointer.string(), " should name a checkpoint file in ", dir.string(), ", found '",
                  name, "'");
      return "";
    }
    if (!fs::exists(dir / name, ec)) {
      error = cat("checkpoint: ", pointer.string(), " names ", name, ", which does not exist");
      return "";
    }
    return (dir / name).string();
  }
  auto all = complete_checkpoints(dir);
  return all.empty() ? "" : all.front().second.string();
}

// The same string on every rank of `comm`, from `root`.
std::string broadcast_string(Communicator& comm, std::string s, int root) {
  uint64_t n = s.size();
  comm.broadcast(&n, sizeof n, root);
  s.resize(n);
  if (n) comm.broadcast(s.data(), n, root);
  return s;
}

// The lineage attribute of a complete checkpoint (rank 0, one process); nullopt when the
// file cannot be read as a checkpoint of this format.
std::optional<std::string> lineage_of(const fs::path& path) {
  try {
    h5::QuietHdf5 quiet;
    IoGroup one = IoGroup::single();
    return read_checkpoint_meta(path.string(), one).lineage;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Writes DIR/latest (naming `name`) atomically: latest.tmp, fsync, rename, fsync of DIR.
std::string write_latest(const fs::path& dir, const std::string& name) {
  const fs::path latest = dir / kLatest, latest_tmp = dir / "latest.tmp";
  std::ofstream out(latest_tmp, std::ios::trunc);
  out << name << "\n";
  out.close();
  if (!out) return cat("cannot write '", latest_tmp.string(), "'");
  if (std::string error = sync_path(latest_tmp); !error.empty()) return error;
  std::error_code ec;
  fs::rename(latest_tmp, latest, ec);  // atomic replacement of the pointer
  if (ec) return cat("cannot rename '", latest_tmp.string(), "' to '", latest.string(), "': ", ec.message());
  return sync_path(dir);
}

// Rule 1 of lineage.h (rank 0): moves every checkpoint of `dir` after `step` into
// dir/abandoned/, then points `latest` at `resumed` (if it is in `dir`) or drops a
// `latest` that named a moved file. Returns an error, "" if none.
std::string move_aside_after(const fs::path& dir, int64_t step, const fs::path& resumed) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  const fs::path aside = dir / "abandoned";
  std::string moved;
  auto all = complete_checkpoints(dir);
  std::reverse(all.begin(), all.end());  // oldest first, as the warning lists them
  for (const auto& [s, path] : all) {
    if (s <= step) continue;
    fs::create_directories(aside, ec);
    if (ec) return cat("cannot create '", aside.string(), "': ", ec.message());
    fs::path target = aside / path.filename();
    for (int k = 1; fs::exists(target, ec); ++k) target = aside / cat(path.filename().string(), ".", k);
    fs::rename(path, target, ec);
    if (ec) return cat("cannot move '", path.string(), "' to '", target.string(), "': ", ec.message());
    moved += cat(moved.empty() ? "" : ", ", path.filename().string());
  }
  if (moved.empty()) return "";
  log::warn("checkpoint: this run continues from step ", step, ", so the later checkpoints ", moved,
            " belong to an abandoned run: moved into ", aside.string(), " (nothing deleted)");
  std::string error;
  if (!resumed.empty() && fs::equivalent(resumed.parent_path(), dir, ec)) {
    error = write_latest(dir, resumed.filename().string());
  } else {
    std::ifstream in(dir / kLatest);
    std::string name;
    if (in && std::getline(in, name) && !fs::exists(dir / name, ec)) fs::remove(dir / kLatest, ec);
  }
  if (error.empty()) error = sync_path(dir);
  return error;
}

// Planted fault checkpoint_crash@RANK:POINT:STEP: the rank kills itself at POINT of saving
// STEP, as a node that dies mid-save would.
void maybe_crash(const Faults& faults, int step, const char* point) {
  const Fault* f = faults.find("checkpoint_crash");
  if (!f || f->target != point || int(*f->value) != step) return;
  log::error("checkpoint: injected crash at '", point, "' of step ", step, " (planted fault checkpoint_crash)");
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace

std::vector<ShardedTensor> sharded_tensors(ParamStore& params) {
  std::vector<ShardedTensor> out;
  for (auto& [name, p] : params.all())
    out.push_back({name, p->spec.global_shape, p->local_rows, p->local_cols, p->slabs});
  return out;
}

CheckpointManager::CheckpointManager(const Config& cfg, const ParallelContext& par, const Faults& faults)
    : cfg_(cfg), faults_(faults), par_(par), io_(par.world) {}

void CheckpointManager::plant_load_faults(ParamStore& params, OptimizerState& optimizer) const {
  for (const Fault* f : faults_.find_all("resume_zero")) {
    const std::string& t = f->target;  // model/NAME, optim/m/NAME or optim/v/NAME (checked by the parser)
    const size_t slash = t.rfind('/');
    const std::string section = t.substr(0, slash), name = t.substr(slash + 1);
    Param* p = params.find(name);
    if (!p) continue;  // held by other ranks
    if (section == "model") p->zero_masters();
    else if (section == "optim/m") optimizer.m(name).zero();
    else optimizer.v(name).zero();
  }
}

std::string CheckpointManager::resume_path() const {
  const auto& c = cfg_.checkpoint;
  if (c.resume == "none") return "";
  if (c.resume == "auto" && c.dir.empty()) return "";
  std::string path, error;
  if (io_.rank() == 0) {
    std::error_code ec;
    if (c.resume == "auto") {
      path = latest_in(c.dir, error);
    } else if (fs::is_directory(c.resume, ec)) {
      path = latest_in(c.resume, error);
      if (path.empty() && error.empty())
        error = cat("checkpoint.resume: directory ", c.resume, " holds no checkpoint");
    } else {
      path = c.resume;  // the reader reports a missing or bad file
    }
  }
  io_.agree(error);
  return broadcast_string(io_.comm(), path, 0);
}

void CheckpointManager::start_lineage(const std::string& parent_lineage, int64_t start, const std::string& resumed,
                                      bool move_aside) {
  run_id_ = broadcast_string(io_.comm(), io_.rank() == 0 ? new_run_id() : "", 0);
  lineage_ = extend_lineage(parent_lineage, run_id_, start, kMaxLineageRuns);
  std::string error;
  if (move_aside && io_.rank() == 0 && !cfg_.checkpoint.dir.empty()) {
    error = move_aside_after(cfg_.checkpoint.dir, start, resumed);
    if (!error.empty()) error = cat("checkpoint.dir ", cfg_.checkpoint.dir, " (rank 0): ", error);
  }
  io_.agree(error);
}

int CheckpointManager::resume(ParamStore& params, OptimizerState& optimizer) {
  // The run's folder is its own from here to its end (dir_lock.h).
  if (!cfg_.checkpoint.dir.empty()) {
    std::string error;
    if (io_.rank() == 0) {
      std::error_code ec;
      fs::create_directories(cfg_.checkpoint.dir, ec);
      error = ec ? cat("cannot create directory: ", ec.message()) : dir_lock_.acquire(cfg_.checkpoint.dir);
      if (!error.empty()) error = cat("checkpoint.dir ", cfg_.checkpoint.dir, " (rank 0): ", error);
    }
    io_.agree(error);
  }
  const std::string path = resume_path();
  if (path.empty()) {
    if (!cfg_.checkpoint.dir.empty()) log::info("checkpoint: no checkpoint to resume from, starting at step 0");
    start_lineage("", 0, "", true);
    return 0;
  }
  const CheckpointMeta meta = load(path, params, optimizer);
  const Config stored = parse_config(meta.config_yaml, cat(path, " (attribute 'config')"));
  if (meta.step > 0 && cfg_.data.shuffle && meta.rng_seed != cfg_.training.seed)
    fail("checkpoint ", path, ": written with training.seed ", meta.rng_seed, " but ", cfg_.source, " has ",
         cfg_.training.seed, "; with data.shuffle the seed fixes the data order, so set training.seed=",
         meta.rng_seed, " to continue the same run");
  if (meta.step > 0 && stored.global_batch_sequences() != cfg_.global_batch_sequences())
    log::warn("checkpoint: the global batch was ", stored.global_batch_sequences(), " sequences when ", path,
              " was written and is ", cfg_.global_batch_sequences(),
              " now; the data stream continues at batch ", meta.data_next_batch, " of the new size");
  start_lineage(meta.lineage, meta.step, path, true);
  continue_from(meta);
  log::info("checkpoint: resumed from ", path, " at step ", meta.step, " (written with pp ", meta.layout_pp, " tp ",
            meta.layout_tp, " dp ", meta.layout_dp, meta.has_optimizer_state ? "" : ", no optimizer state", ")");
  if (meta.step >= cfg_.training.steps)
    log::info("checkpoint: step ", meta.step, " is not before training.steps ", cfg_.training.steps,
              ", nothing left to train");
  return int(meta.step);
}

CheckpointMeta CheckpointManager::load(const std::string& path, ParamStore& params, OptimizerState& optimizer) {
  std::vector<ShardedTensor> tensors = sharded_tensors(params);
  std::vector<Param*> by_index;
  for (auto& [name, p] : params.all()) by_index.push_back(p.get());
  // The reader gives each tensor's whole local shard; a ZeRO-1 state keeps its range of it
  // (and sharded masters theirs, rounding the whole into the bf16 copy: Param::set_masters).
  auto upload = [&](Section s, int i, const float* host) {
    Param& p = *by_index[i];
    const std::string& name = p.spec.name;
    if (s == Section::Model) p.set_masters(host);
    else if (s == Section::OptimM) optimizer.upload_local(name, optimizer.m(name), host);
    else optimizer.upload_local(name, optimizer.v(name), host);
  };
  const CheckpointMeta meta = read_checkpoint_file(path, tensors, upload, cfg_, true, io_);
  if (!meta.has_optimizer_state) optimizer.zero();
  plant_load_faults(params, optimizer);
  return meta;
}

void CheckpointManager::continue_from(const CheckpointMeta& meta) {
  base_step_ = meta.step;
  base_tokens_ = meta.tokens_seen;
  base_sequences_ = meta.data_sequences_seen;
  data_offset_ = meta.data_next_batch - meta.step;  // batches skipped by rollbacks (read_meta: >= 0)
  loaded_spike_guard_ = meta.spike_guard;
}

CheckpointManager::Rollback CheckpointManager::rollback(ParamStore& params, OptimizerState& optimizer) {
  std::string path, error;
  if (io_.rank() == 0) {
    path = latest_in(cfg_.checkpoint.dir, error);
    if (path.empty() && error.empty()) error = "holds no checkpoint to roll back to";
    if (!error.empty()) error = cat("checkpoint.dir ", cfg_.checkpoint.dir, " (rank 0): ", error);
  }
  io_.agree(error);
  path = broadcast_string(io_.comm(), path, 0);
  const CheckpointMeta meta = load(path, params, optimizer);
  continue_from(meta);
  return {int(meta.step), path};
}

void CheckpointManager::load_step_state(const std::string& dir, int step, ParamStore& params,
                                        OptimizerState& optimizer) {
  const std::string path = (fs::path(dir) / checkpoint_name(step)).string();
  const CheckpointMeta meta = load(path, params, optimizer);
  if (meta.step != step) fail("--step-from: ", path, " holds step ", meta.step, ", expected step ", step);
  if (!meta.has_optimizer_state) fail("--step-from: ", path, " holds no optimizer state (AdamW moments)");
}

bool CheckpointManager::due(int step, bool final) const {
  const auto& c = cfg_.checkpoint;
  return !c.dir.empty() && (final || (c.every > 0 && step % c.every == 0));
}

void CheckpointManager::after_step(ParamStore& params, OptimizerState& optimizer, int step, bool final) {
  if (due(step, final)) save(params, optimizer, step);
}

CheckpointMeta CheckpointManager::meta_for(int step) const {
  CheckpointMeta m;
  const int64_t steps = step - base_step_;
  m.step = step;
  m.data_next_batch = step + data_offset_;  // the trainer reads global batch step + offset at step + 1
  m.data_sequences_seen = base_sequences_ + steps * cfg_.global_batch_sequences();
  m.tokens_seen = base_tokens_ + steps * cfg_.global_batch_sequences() * int64_t(cfg_.model.seq_len);
  m.rng_seed = cfg_.training.seed;
  m.rng_counter = step;
  m.config_yaml = to_yaml(cfg_);
  m.layout_pp = par_.pp;
  m.layout_tp = par_.tp;
  m.layout_dp = par_.dp;
  m.has_optimizer_state = true;
  m.writer = cat("pptrain ", kVersion);
  m.lineage = lineage_;
  m.spike_guard = spike_guard_;
  return m;
}

void CheckpointManager::prune(const fs::path& newest) const {
  // Only now that `newest` is complete and named by `latest`: keep it and the
  // keep_last - 1 newest others of this lineage (lineage.h, rule 3); drop leftovers of
  // interrupted saves. Files of other lineages, or unreadable ones, are left alone.
  const fs::path dir = newest.parent_path();
  std::error_code ec;
  int kept = 1;
  for (const auto& [s, path] : complete_checkpoints(dir)) {
    if (path == newest) continue;
    const std::optional<std::string> lineage = lineage_of(path);
    if (!lineage || !in_lineage(*lineage, s, lineage_)) continue;
    if (kept < cfg_.checkpoint.keep_last) ++kept;
    else fs::remove(path, ec);
  }
  static const std::regex leftover(R"(step_\d+\.h5\.tmp)");
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (std::regex_match(entry.path().filename().string(), leftover)) fs::remove(entry.path(), ec);
}

std::string CheckpointManager::save(ParamStore& params, OptimizerState& optimizer, int step) {
  const fs::path dir = cfg_.checkpoint.dir;
  const fs::path final_path = dir / checkpoint_name(step);
  const fs::path tmp_path = final_path.string() + ".tmp";
  const int world_rank = io_.rank();

  std::string error;
  if (world_rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) error = cat("checkpoint.dir: cannot create directory '", dir.string(), "': ", ec.message());
  }
  io_.agree(error);

  std::vector<ShardedTensor> tensors = sharded_tensors(params);
  std::vector<Param*> by_index;
  for (auto& [name, p] : params.all()) by_index.push_back(p.get());
  // ZeRO-1: each dp rank writes the part of every tensor in its range (moments and masters
  // alike; under bf16 the rank holds the masters of that range only), the copies that
  // count once only (Param::primary), so the ranks' parts tile each dataset and saving gets
  // faster with dp. Otherwise each distinct shard is written by the lowest rank holding it
  // (build_global_table).
  if (optimizer.sharded())
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Param& p = *by_index[i];
      tensors[i].slabs = p.primary ? slabs_in_range(p, optimizer.range(p.spec.name)) : std::vector<Slab>{};
    }
  auto download = [&](Section s, int i, float* host) {
    Param& p = *by_index[i];
    const std::string& name = p.spec.name;
    if (s == Section::Model) p.download_masters(host);  // under sharded masters, the range written
    else if (s == Section::OptimM) optimizer.download_local(name, optimizer.m(name), host);
    else optimizer.download_local(name, optimizer.v(name), host);
  };
  // Saving without a resume() (tools, tests): a fresh line, and nothing in the directory
  // is taken for an abandoned branch.
  if (run_id_.empty()) start_lineage("", 0, "", false);
  WriteHooks hooks;
  const Fault* freeze = faults_.find("freeze_save");
  hooks.probe = [&](const char* point) {
    maybe_crash(faults_, step, point);
    if (freeze && freeze->target == point) std::raise(SIGSTOP);  // a rank hung mid-save (the watchdog's test)
  };
  auto phase = [&](const std::string& what) {
    if (progress_) progress_(cat("checkpoint save: ", what, " (collective over every rank)"));
  };
  hooks.progress = phase;
  if (const Fault* f = faults_.find("checkpoint_write_fail")) hooks.fail_dataset = "/" + f->target;
  hooks.skip_abandon_close = faults_.find("checkpoint_abandon_desync") != nullptr;
  // Closing an abandoned file writes only HDF5's metadata (KiBs): a minute is ample on a
  // slow parallel file system. Under the watchdog's half, so that this bound, whose line
  // names the save's real failure, ends a stuck close before the watchdog does.
  const double watchdog_s = cfg_.runtime.watchdog_s;
  hooks.abandon_close_s = watchdog_s > 0 ? std::min(60.0, watchdog_s / 2) : 60.0;
  // The writer agrees on every step and removes the .tmp itself when it throws.
  last_write_ = write_checkpoint_file(tmp_path.string(), tensors, download, meta_for(step), io_, hooks);
  phase("waiting for every rank's part to be in the closed file");
  io_.barrier();  // every rank's part is in the closed file
  hooks.probe("before_rename");
  phase(cat("rank 0 renaming ", tmp_path.filename().string(), " and updating 'latest'"));

  if (world_rank == 0) {
    std::error_code ec;
    error = sync_path(tmp_path);
    if (error.empty()) {
      fs::rename(tmp_path, final_path, ec);
      if (ec) error = cat("cannot rename '", tmp_path.string(), "' to '", final_path.string(), "': ", ec.message());
    }
    if (error.empty()) error = sync_path(dir);
    if (error.empty()) error = write_latest(dir, final_path.filename().string());
    if (error.empty()) prune(final_path);
    if (!error.empty()) {
      fs::remove(tmp_path, ec);  // a failed save leaves no partial file behind
      error = cat("checkpoint ", final_path.string(), " (rank 0): ", error);
    }
  }
  io_.agree(error);
  phase("done");

  double bytes = double(last_write_.bytes), seconds = last_write_.seconds;
  io_.comm().allreduce(&bytes, 1, ReduceOp::Sum);
  io_.comm().allreduce(&seconds, 1, ReduceOp::Max);
  char rate[96];
  std::snprintf(rate, sizeof rate, "%.1f MB in %.2f s, %.0f MB/s", bytes / 1e6, seconds,
                bytes / 1e6 / std::max(seconds, 1e-9));
  log::info("checkpoint: wrote ", final_path.string(), " at step ", step, " (", rate, ")");
  return final_path.string();
}

}  // namespace pptrain
