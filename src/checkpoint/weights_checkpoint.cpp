#include "checkpoint/weights_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_writer.h"
#include "core/error.h"
#include "core/version.h"

namespace pptrain {

namespace {

const char* kind_of(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "something";
}

}  // namespace

void check_new_output(const std::string& out_path, const std::string& what) {
  if (out_path.empty()) fail(what, ": the output path is empty");
  struct stat st;
  if (::lstat(out_path.c_str(), &st) == 0)
    fail(what, ": '", out_path, "' exists (", kind_of(st), "); the output must be a new file: remove it or give "
         "another path");
  if (errno != ENOENT) fail(what, ": cannot check '", out_path, "': ", std::strerror(errno));
  const std::filesystem::path parent = std::filesystem::path(out_path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    fail(what, ": the folder of '", out_path, "' does not exist (or is not a directory)");
}

void write_weights_checkpoint(const std::string& out_path, const ModelConfig& model, const std::string& source,
                              const std::vector<WeightTensor>& tensors, const WeightValuesFn& values,
                              const std::string& writer) {
  Config cfg;
  cfg.model = model;
  cfg.source = source;

  // Every tensor whole on this one process: one slab covering it.
  std::vector<ShardedTensor> shards;
  for (const WeightTensor& t : tensors) {
    const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    shards.push_back({t.name, t.shape, rows, cols, {Slab{0, 0, 0, 0, rows, cols}}});
  }
  auto download = [&](Section, int i, float* host) { values(i, host); };
  CheckpointMeta meta;
  meta.rng_seed = cfg.training.seed;
  meta.config_yaml = to_yaml(cfg);
  meta.has_optimizer_state = false;
  meta.writer = cat("pptrain ", kVersion, " ", writer);

  const std::string what = writer.substr(0, writer.find(' '));
  check_new_output(out_path, what);
  // A name of this process's own beside the output: no other file is truncated by it.
  const std::string tmp = cat(out_path, ".tmp.", ::getpid());
  struct stat st;
  if (::lstat(tmp.c_str(), &st) == 0) fail(what, ": '", tmp, "' exists; remove it");
  try {
    IoGroup io = IoGroup::single();
    write_checkpoint_file(tmp, shards, download, meta, io);
    // No replace: an output that appeared since the check stays as it is.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out_path.c_str(), RENAME_NOREPLACE) != 0) {
      const int err = errno;
      if (err == EEXIST) fail(what, ": '", out_path, "' appeared while the import ran; it was left as it is");
      // File systems without RENAME_NOREPLACE: the check again, then a plain rename.
      if (err != EINVAL && err != ENOSYS)
        fail(what, ": cannot rename '", tmp, "' to '", out_path, "': ", std::strerror(err));
      check_new_output(out_path, what);
      std::error_code ec;
      std::filesystem::rename(tmp, out_path, ec);
      if (ec) fail(what, ": cannot rename '", tmp, "' to '", out_path, "': ", ec.message());
    }
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace pptrain
