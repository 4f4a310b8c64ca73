#include "checkpoint/checkpoint_writer.h"

#include <chrono>

#include "checkpoint/hdf5_io.h"

namespace pptrain {
namespace {

// With several writers, objects of 4 MiB and more start on a 1 MiB boundary: on striped
// parallel file systems (Lustre, GPFS) each rank's chunk then covers whole stripes and
// ranks do not contend for the lock of a shared stripe. Small objects pack densely; a
// single writer gains nothing from alignment and skips it.
constexpr hsize_t kAlignThreshold = hsize_t(4) << 20;
constexpr hsize_t kAlignment = hsize_t(1) << 20;

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
  return fapl;
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

}  // namespace

WriteStats write_checkpoint_file(const std::string& path, const std::vector<ShardedTensor>& tensors,
                                 const DownloadFn& download, const CheckpointMeta& meta, const IoGroup& io,
                                 const ProbeFn& probe) {
  const auto start = std::chrono::steady_clock::now();
  h5::QuietHdf5 quiet;
  const std::string where = cat("checkpoint ", path);
  const std::vector<TableEntry> table = build_global_table(tensors, io);

  h5::PropertyList fapl = file_access(io, where);
  h5::File file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()));
  io.agree(file.valid() ? "" : cat(where, ": cannot create the file (rank ", io.rank(), "): ", h5::hdf5_error_text()));
  if (probe) probe("file_created");

  write_meta(file.id(), meta, where);
  std::vector<Section> sections = {Section::Model};
  if (meta.has_optimizer_state) sections.insert(sections.end(), {Section::OptimM, Section::OptimV});
  for (const char* g : {"/model", "/optim", "/optim/m", "/optim/v"}) {
    if (!meta.has_optimizer_state && std::string(g) != "/model") continue;
    h5::Group group(h5::check(H5Gcreate2(file.id(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), cat(where, ": ", g)));
  }

  h5::PropertyList dxpl(h5::check(H5Pcreate(H5P_DATASET_XFER), where));
  if (io.uses_mpi_io()) h5::check_status(H5Pset_dxpl_mpio(dxpl.id(), H5FD_MPIO_COLLECTIVE), where);

  WriteStats stats;
  std::vector<float> local;
  for (Section section : sections) {
    for (const TableEntry& e : table) {
      const std::string name = cat(section_group(section), "/", e.name);
      const std::string ctx = cat(where, ": dataset ", name);
      std::vector<hsize_t> dims(e.shape.begin(), e.shape.end());
      h5::Dataspace file_space(h5::check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), ctx));
      h5::PropertyList dcpl = dataset_creation(e, ctx);
      h5::Dataset ds(h5::check(H5Dcreate2(file.id(), name.c_str(), H5T_IEEE_F32LE, file_space.id(), H5P_DEFAULT,
                                          dcpl.id(), H5P_DEFAULT),
                               ctx));
      const ShardedTensor* mine = e.writes ? &tensors[e.local] : nullptr;
      if (mine) {
        local.resize(mine->local_numel());
        download(section, e.local, local.data());
      }
      const std::vector<int64_t> local_shape =
          mine ? local_shape_of(*mine) : std::vector<int64_t>(e.shape.size(), 1);
      // Ranks that write nothing (or fewer slabs) join each collective write empty.
      for (int k = 0; k < e.transfers; ++k) {
        const Slab* slab = mine && k < int(mine->slabs.size()) ? &mine->slabs[k] : nullptr;
        h5::transfer_slab(ds.id(), local_shape, slab, true, local.data(), dxpl.id(), ctx);
        if (slab) stats.bytes += slab->rows * slab->cols * int64_t(sizeof(float));
      }
    }
    if (section == Section::Model && probe) probe("model_written");
  }
  // With MPI-IO, a flush is an MPI_File_sync: the data is on the file system before the
  // manager renames the file.
  h5::check_status(H5Fflush(file.id(), H5F_SCOPE_GLOBAL), cat(where, ": flush"));
  h5::check_status(file.close(), cat(where, ": close"));
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace pptrain
