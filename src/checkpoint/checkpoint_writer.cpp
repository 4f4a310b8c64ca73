#include "checkpoint/checkpoint_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"
#include "core/log.h"

namespace pptrain {
namespace {

// With several writers, objects of 4 MiB and more start on a 1 MiB boundary: on striped
// parallel file systems (Lustre, GPFS) each rank's chunk then covers whole stripes and
// ranks do not contend for the lock of a shared stripe. Small objects pack densely; a
// single writer gains nothing from alignment and skips it.
constexpr hsize_t kAlignThreshold = hsize_t(4) << 20;
constexpr hsize_t kAlignment = hsize_t(1) << 20;
// What a failed create, flush or close asks the file system for when diagnosing why
// (space_diagnosis): about what HDF5's metadata of a checkpoint takes.
constexpr int64_t kMetadataBytes = int64_t(64) << 10;

h5::PropertyList file_access(const IoGroup& io, const std::string& where) {
  h5::PropertyList fapl(h5::check(H5Pcreate(H5P_FILE_ACCESS), where));
  if (io.uses_mpi_io()) {
    h5::check_status(H5Pset_fapl_mpio(fapl.id(), io.mpi(), MPI_INFO_NULL), where);
    // File metadata written in collective operations, and read by one rank and
    // broadcast, instead of every rank touching it (a metadata storm at scale).
    h5::check_status(H5Pset_coll_metadata_write(fapl.id(), true), where);
    h5::check_status(H5Pset_all_coll_metadata_ops(fapl.id(), true), where);
  }
  if (io.size() > 1) h5::check_status(H5Pset_alignment(fapl.id(), kAlignThreshold, kAlignment), where);
  // The 1.10 file format: superblock, object headers and chunk indexes (fixed arrays)
  // carry their own checksums, so HDF5 detects damage to the file's metadata when it
  // reads it (readers need HDF5 1.10 or later).
  h5::check_status(H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_V110, H5F_LIBVER_LATEST), where);
  return fapl;
}

// Links and attributes kept in their object's header ("compact" storage) rather than in
// a fractal heap ("dense", HDF5's default beyond 8 of them): object headers of the 1.8
// format carry checksums, so a damaged link or attribute is an HDF5 error on read, where
// damage to a dense heap (unchecked) made HDF5 1.10's link iteration free garbage (found
// by fuzzing inspect). HDF5 allows up to 65535 compact links per group, i.e. about 5000
// transformer blocks of 12 tensors; attributes above 64 KiB move to dense storage by
// themselves.
constexpr unsigned kMaxCompact = 65535;

h5::PropertyList compact_objects(hid_t plist_class, const std::string& where) {
  h5::PropertyList plist(h5::check(H5Pcreate(plist_class), where));
  h5::check_status(H5Pset_link_phase_change(plist.id(), kMaxCompact, kMaxCompact), where);
  h5::check_status(H5Pset_attr_phase_change(plist.id(), kMaxCompact, kMaxCompact), where);
  return plist;
}

// Storage of one dataset: one chunk per writer shard when the tensor is sharded, plain
// contiguous storage when a single chunk would cover it. Space is allocated at creation
// and never pre-filled (every element is written).
h5::PropertyList dataset_creation(const TableEntry& e, const std::string& where) {
  h5::PropertyList dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), where));
  if (e.chunk != e.shape) {
    std::vector<hsize_t> chunk(e.chunk.begin(), e.chunk.end());
    h5::check_status(H5Pset_chunk(dcpl.id(), int(chunk.size()), chunk.data()), where);
  }
  h5::check_status(H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY), where);
  h5::check_status(H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER), where);
  return dcpl;
}

// MPI-IO reports a short write only as "file write failed", without the system's
// reason. Asking the file system for the same space again names it: a probe file next
// to `path` is given `bytes` with posix_fallocate, whose error (ENOSPC, EDQUOT, EIO, ...)
// is the reason the write could not complete. "" when the space can be had (the cause
// was something else) or the probe cannot be made.
std::string space_diagnosis(const std::string& path, int64_t bytes, int rank) {
  const std::string probe = cat(path, ".probe", rank);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return errno == ENOSPC || errno == EDQUOT ? std::strerror(errno) : "";
  // At most 64 MiB: where the file system cannot allocate natively, glibc touches every
  // block of the range.
  const int rc = ::posix_fallocate(fd, 0, std::clamp<int64_t>(bytes, 4096, int64_t(64) << 20));
  ::close(fd);
  ::unlink(probe.c_str());
  return rc == 0 || rc == EOPNOTSUPP || rc == EINVAL ? "" : std::strerror(rc);
}

// An upper bound on the size of the finished file: the values, each dataset's object
// header, checksum attribute and link (a few hundred bytes; 1 KiB allowed), the root
// attributes (the resolved config and 64 KiB for the rest of the superblock, root group
// and small attributes), and the alignment padding of large datasets.
int64_t file_bytes_bound(const std::vector<TableEntry>& table, int sections, const CheckpointMeta& meta,
                         const IoGroup& io) {
  int64_t bytes = (int64_t(64) << 10) + int64_t(meta.config_yaml.size());
  for (const TableEntry& e : table) {
    const int64_t numel = e.shape[0] * (e.shape.size() > 1 ? e.shape[1] : 1);
    const int64_t padding = io.size() > 1 && numel * 4 >= int64_t(kAlignThreshold) ? int64_t(kAlignment) : 0;
    bytes += sections * (numel * int64_t(sizeof(float)) + 1024 + padding);
  }
  return bytes;
}

// Reserves the blocks of the whole file before HDF5 writes any of it (rank 0, beyond the
// end of file, which stays where HDF5 puts it). A full disk is then one clean error here:
// once a metadata flush has failed, HDF5 1.10 can no longer close the file (its close
// fails again, "slist already enabled?", and the library's own cleanup at exit crashes on
// the open file). File systems without fallocate (EOPNOTSUPP) are written unreserved.
// What the bound over-reserved is given back after the close (release_reserved_space).
void reserve_space(const std::string& path, int64_t bytes, const std::string& where) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(where, ": cannot open to reserve space (", std::strerror(errno), ")");
  const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, bytes) == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0 || rc == EOPNOTSUPP || rc == ENOSYS) return;
  fail(where, ": cannot reserve ", bytes, " bytes for the checkpoint: ", std::strerror(rc));
}

// Truncating a file to its own size frees the blocks reserved past its end (ext4, xfs,
// tmpfs); a failure only leaves them allocated, so it is not an error.
void release_reserved_space(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) (void)::truncate(path.c_str(), info.st_size);
}

// `error` with the file system's reason appended when it names none.
std::string with_reason(const std::string& error, const std::string& path, int64_t bytes, int rank) {
  if (error.find("errno") != std::string::npos) return error;  // HDF5's POSIX driver names it
  const std::string reason = space_diagnosis(path, bytes, rank);
  return reason.empty() || error.find(reason) != std::string::npos ? error : cat(error, ": ", reason);
}

// Ends this process unless destroyed within `seconds`: prints `line` as this rank's one
// error line and exits 1 (_Exit: the main thread is blocked in a collective and cannot be
// asked; mpirun and srun then end the other ranks, as for the watchdog).
class Deadline {
 public:
  Deadline(double seconds, std::string line)
      : line_(std::move(line)), thread_([this, seconds] {
          std::unique_lock lock(mutex_);
          if (wake_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
          log::error(line_);
          std::fflush(nullptr);
          std::_Exit(1);
        }) {}
  ~Deadline() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::string line_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;  // last: starts once the members above exist
};

// One file being written by the io group. Each step runs on every rank and ends in an
// agreement; on an agreed failure the file is abandoned on every rank together.
class CollectiveWrite {
 public:
  CollectiveWrite(const std::string& path, const IoGroup& io, const WriteHooks& hooks)
      : path_(path), where_(cat("checkpoint ", path)), io_(io), hooks_(hooks) {}
  ~CollectiveWrite() {
    // Reached with the file open only when an exception that is not a pptrain::Error
    // unwinds past every step (a bug): closing here could wait for ranks that are
    // elsewhere, so leak the handle instead; the process is ending anyway.
    if (file.valid()) (void)file.release();
  }
  CollectiveWrite(const CollectiveWrite&) = delete;
  CollectiveWrite& operator=(const CollectiveWrite&) = delete;

  const std::string& where() const { return where_; }

  // Runs `body` on this rank, then agrees with the others: if any rank's body threw, every
  // rank abandons the file and throws the lowest failing rank's message.
  // `io_bytes`: how much the step writes to the file system (a failure's reason is then
  // diagnosed, with_reason), 0 for steps that do not write.
  // `phase` says what the step does, for the watchdog (WriteHooks::progress): reported
  // before the body, which may block in a collective HDF5 call, and again once the ranks
  // agreed, so a save that moves on is seen to.
  template <typename Body>
  void step(const std::string& phase, Body&& body, int64_t io_bytes = 0) {
    if (hooks_.progress) hooks_.progress(phase);
    std::string error;
    try {
      body();
    } catch (const std::exception& e) {
      error = io_bytes > 0 ? with_reason(e.what(), path_, io_bytes, io_.rank()) : e.what();
    }
    agree(error);
    if (hooks_.progress) hooks_.progress(phase + ", done");
  }

  void agree(const std::string& error) {
    try {
      io_.agree(error);
    } catch (const Error& agreed) {
      abandon(agreed.what());
      throw;
    }
  }

  h5::File file;
  h5::Dataset dataset;  // the dataset between its creation and its write

 private:
  // Every rank is here (after an agreement), so the collective close cannot wait for an
  // absent rank. Truncating first returns a full disk's blocks, so HDF5's own metadata
  // writes during the close are likely to succeed. Where one still fails (another process
  // filled the disk to its last block), HDF5 skips that rank's part of the flush's
  // collective and the ranks wait in different collectives: measured, a 2-rank job hung in
  // H5Fclose until the watchdog. Hence the bound (WriteHooks::abandon_close_s) on the close
  // and the barrier, and the file removed first: an open file may be unlinked, and no .tmp
  // stays behind when the bound ends the process.
  void abandon(const std::string& agreed) {
    if (io_.rank() == 0) {
      std::error_code ec;
      if (file.valid()) std::filesystem::resize_file(path_, 0, ec);
      std::filesystem::remove(path_, ec);
    }
    Deadline bound(hooks_.abandon_close_s,
                   cat(agreed, " (and closing the abandoned file did not finish within ", hooks_.abandon_close_s,
                       " s: a rank's HDF5 metadata flush failed, as on a disk filled to its last block)"));
    dataset.reset();  // no object left open: the MPI-IO driver's close refuses a file with any
    if (file.valid() && !hooks_.skip_abandon_close) file.close();
    h5::hdf5_error_text();  // clears the stack the failed close may have left
    io_.barrier();
  }

  std::string path_, where_;
  const IoGroup& io_;
  const WriteHooks& hooks_;
};

// A dataset's values may be stored only if finite: the first non-finite element, named.
std::string nonfinite_error(const std::string& ctx, const TableEntry& e, const SlabDigest& d) {
  if (d.first_nonfinite < 0) return "";
  const int64_t cols = e.shape.size() > 1 ? e.shape[1] : 1;
  const std::string at = e.shape.size() > 1 ? cat("[", d.first_nonfinite / cols, ", ", d.first_nonfinite % cols, "]")
                                            : cat("[", d.first_nonfinite, "]");
  return cat(ctx, " holds a non-finite value (", d.nonfinite_value, " at ", at,
             "); refusing to write a checkpoint that cannot be trained from");
}

// Creates one dataset with its `checksum` attribute and writes this rank's slabs of it in
// `e.transfers` collective transfers. Every rank takes part in every transfer even after
// one failed here.
void write_dataset(CollectiveWrite& w, const TableEntry& e, const std::string& name, uint64_t checksum,
                   const ShardedTensor* mine, const std::vector<float>& local, hid_t dxpl, const WriteHooks& hooks,
                   WriteStats& stats) {
  const std::string ctx = cat(w.where(), ": dataset ", name);
  h5::Dataset& ds = w.dataset;
  w.step(cat("creating dataset ", name), [&] {
    std::vector<hsize_t> dims(e.shape.begin(), e.shape.end());
    h5::Dataspace file_space(h5::check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), ctx));
    h5::PropertyList dcpl = dataset_creation(e, ctx);
    ds = h5::Dataset(h5::check(H5Dcreate2(w.file.id(), name.c_str(), H5T_IEEE_F32LE, file_space.id(), H5P_DEFAULT,
                                          dcpl.id(), H5P_DEFAULT),
                               ctx));
    h5::write_attribute(ds.id(), "checksum", checksum, ctx);
  });
  w.step(cat("writing dataset ", name), [&] {
    const std::vector<int64_t> local_shape = mine ? local_shape_of(*mine) : std::vector<int64_t>(e.shape.size(), 1);
    std::string first_error;
    for (int k = 0; k < e.transfers; ++k) {
      const Slab* slab = mine && k < int(mine->slabs.size()) ? &mine->slabs[k] : nullptr;
      try {
        h5::transfer_slab(ds.id(), local_shape, slab, true, const_cast<float*>(local.data()), dxpl, ctx);
        if (slab) stats.bytes += slab->rows * slab->cols * int64_t(sizeof(float));
      } catch (const Error& err) {
        if (first_error.empty()) first_error = err.what();
      }
    }
    if (first_error.empty() && name == hooks.fail_dataset)
      first_error = cat(ctx, ": write failed: ", std::strerror(ENOSPC), " (planted fault checkpoint_write_fail)");
    ds.reset();
    if (!first_error.empty()) throw Error(first_error);
  }, int64_t(sizeof(float)) * e.shape[0] * (e.shape.size() > 1 ? e.shape[1] : 1));
}

}  // namespace

WriteStats write_checkpoint_file(const std::string& path, const std::vector<ShardedTensor>& tensors,
                                 const DownloadFn& download, const CheckpointMeta& meta, const IoGroup& io,
                                 const WriteHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  h5::QuietHdf5 quiet;
  const std::vector<TableEntry> table = build_global_table(tensors, io);
  CollectiveWrite w(path, io, hooks);
  const std::string& where = w.where();

  h5::PropertyList fapl = file_access(io, where);
  w.step("creating the file", [&] {
    errno = 0;
    h5::PropertyList fcpl = compact_objects(H5P_FILE_CREATE, where);  // the root group's
    w.file = h5::File(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.id(), fapl.id()));
    if (!w.file.valid()) h5::io_check(-1, cat(where, ": cannot create the file (rank ", io.rank(), ")"));
  }, kMetadataBytes);
  if (hooks.probe) hooks.probe("file_created");

  std::vector<Section> sections = {Section::Model};
  if (meta.has_optimizer_state) sections.insert(sections.end(), {Section::OptimM, Section::OptimV});
  w.step("reserving space", [&] {
    if (io.rank() == 0) reserve_space(path, file_bytes_bound(table, int(sections.size()), meta, io), where);
  });
  // Every link the file will hold, bound to the root (checkpoint_format.h).
  CheckpointMeta bound = meta;
  bound.format_version = kCheckpointFormatVersion;
  std::vector<std::string> links;
  for (const char* g : {"/model", "/optim", "/optim/m", "/optim/v"})
    if (meta.has_optimizer_state || std::string(g) == "/model") links.push_back(g);
  for (Section section : sections)
    for (const TableEntry& e : table) links.push_back(cat(section_group(section), "/", e.name));
  bound.contents_checksum = checksum_text(contents_text(links));
  w.step("writing the root attributes and groups", [&] {
    write_meta(w.file.id(), bound, where);
    for (const char* g : {"/model", "/optim", "/optim/m", "/optim/v"}) {
      if (!meta.has_optimizer_state && std::string(g) != "/model") continue;
      h5::PropertyList gcpl = compact_objects(H5P_GROUP_CREATE, where);
      h5::Group group(h5::check(H5Gcreate2(w.file.id(), g, H5P_DEFAULT, gcpl.id(), H5P_DEFAULT), cat(where, ": ", g)));
    }
  });

  h5::PropertyList dxpl(h5::check(H5Pcreate(H5P_DATASET_XFER), where));
  if (io.uses_mpi_io()) h5::check_status(H5Pset_dxpl_mpio(dxpl.id(), H5FD_MPIO_COLLECTIVE), where);

  WriteStats stats;
  std::vector<float> local;  // [local_numel] of the tensor being written
  for (Section section : sections) {
    for (const TableEntry& e : table) {
      const std::string name = cat(section_group(section), "/", e.name);
      const std::string ctx = cat(where, ": dataset ", name);
      const ShardedTensor* mine = e.writes ? &tensors[e.local] : nullptr;
      // The checksum and the finiteness in one pass over this rank's slabs, agreed
      // before the dataset exists: nothing non-finite is ever written.
      SlabDigest digest;
      w.step(cat("hashing dataset ", name), [&] {
        if (!mine) return;
        local.resize(mine->local_numel());
        download(section, e.local, local.data());
        const int64_t global_cols = e.shape.size() > 1 ? e.shape[1] : 1;
        digest = digest_slabs(local.data(), mine->local_cols, mine->slabs, global_cols);
        if (std::string error = nonfinite_error(ctx, e, digest); !error.empty()) throw Error(error);
        if (section == Section::OptimV && digest.first_negative >= 0)
          throw Error(cat(ctx, " holds a negative second moment (", digest.negative_value, " at element ",
                          digest.first_negative, "); refusing to write a checkpoint that cannot be trained from"));
      });
      std::vector<uint64_t> sum = {digest.sum};
      io.sum(sum);  // every element is hashed by the one rank that writes it
      write_dataset(w, e, name, sum[0] + dataset_binding(name, e.shape), mine, local, dxpl.id(), hooks, stats);
    }
    if (section == Section::Model && hooks.probe) hooks.probe("model_written");
  }
  // With MPI-IO, a flush is an MPI_File_sync: the data is on the file system before the
  // manager renames the file.
  w.step("flushing the file", [&] {
    errno = 0;
    h5::io_check(H5Fflush(w.file.id(), H5F_SCOPE_GLOBAL), cat(where, ": flush"));
  }, kMetadataBytes);
  w.step("closing the file", [&] {
    errno = 0;
    h5::io_check(w.file.close(), cat(where, ": close"));
  }, kMetadataBytes);
  if (io.rank() == 0) release_reserved_space(path);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace pptrain
