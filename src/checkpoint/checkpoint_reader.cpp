#include "checkpoint/checkpoint_reader.h"

#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/checkpoint_checks.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"

namespace pptrain {
namespace {

// A problem found by rank 0 (existence, signature) that every rank must report.
std::string check_file_on_rank0(const std::string& path, const IoGroup& io) {
  if (io.rank() != 0) return "";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return cat("checkpoint ", path, ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) return cat("checkpoint ", path, ": not a regular file");
  h5::QuietHdf5 quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0)
    return cat("checkpoint ", path, ": not an HDF5 file (no HDF5 signature; expected a checkpoint written by pptrain)");
  return "";
}

// The model section of the config stored in the file, against the job's: the keys that
// shape the tensors (rope_theta and norm_eps may change, as when a context is extended;
// so may a llama's seq_len, which no tensor depends on, unlike gpt2's wpe [T, C]).
std::string compare_models(const Config& job, const CheckpointMeta& meta, const std::string& path) {
  Config stored;
  try {
    stored = parse_config(meta.config_yaml, cat(path, " (attribute 'config')"));
  } catch (const Error& e) {
    return cat("checkpoint ", path, ": the stored config does not parse: ", e.what());
  }
  const ModelConfig &a = stored.model, &b = job.model;
  auto differs = [&](const char* key, auto in_file, auto in_job) -> std::string {
    if (in_file == in_job) return "";
    return cat("checkpoint ", path, ": model.", key, " is ", in_file, " in the file but ", in_job, " in ",
               job.source.empty() ? std::string("the config") : job.source,
               " (a checkpoint loads only into the model that wrote it)");
  };
  for (const std::string& e :
       {differs("arch", a.arch, b.arch), differs("n_layer", a.n_layer, b.n_layer), differs("n_head", a.n_head, b.n_head),
        differs("d_model", a.d_model, b.d_model), b.llama() ? "" : differs("seq_len", a.seq_len, b.seq_len),
        differs("vocab_size", a.vocab_size, b.vocab_size),
        differs("tie_embeddings", a.tie_embeddings, b.tie_embeddings),
        differs("n_kv_head", a.kv_heads(), b.kv_heads()), differs("ffn_hidden", a.mlp_hidden(), b.mlp_hidden()),
        differs("head_dim", a.attention_head_dim(), b.attention_head_dim())})
    if (!e.empty()) return e;
  return "";
}

// Every dataset of `section` that the table needs passes check_dataset_header (its
// checksum stored in `checksums` by dataset path), and the group holds no other link.
std::string check_group(hid_t file, Section section, const std::vector<TableEntry>& table, const std::string& path,
                        std::map<std::string, uint64_t>& checksums) {
  std::vector<std::string> names;
  for (const TableEntry& e : table) names.push_back(e.name);
  if (std::string problem = check_group_members(file, section, names, path); !problem.empty()) return problem;
  for (const TableEntry& e : table) {
    const std::string name = cat(section_group(section), "/", e.name);
    if (std::string problem = check_dataset_header(file, name, e.shape, path, &checksums[name]); !problem.empty())
      return problem;
  }
  return "";
}

}  // namespace

h5::File open_checkpoint(const std::string& path, const IoGroup& io) {
  io.agree(check_file_on_rank0(path, io));
  h5::QuietHdf5 quiet;
  const std::string where = cat("checkpoint ", path);
  h5::PropertyList fapl(h5::check(H5Pcreate(H5P_FILE_ACCESS), where));
  if (io.uses_mpi_io()) {
    h5::check_status(H5Pset_fapl_mpio(fapl.id(), io.mpi(), MPI_INFO_NULL), where);
    h5::check_status(H5Pset_all_coll_metadata_ops(fapl.id(), true), where);
  }
  h5::File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id()));
  io.agree(file.valid() ? ""
                        : cat(where, ": cannot open the HDF5 file, it is truncated or damaged (rank ", io.rank(),
                              "): ", h5::hdf5_error_text()));
  return file;
}

CheckpointMeta read_checkpoint_meta(const std::string& path, const IoGroup& io) {
  h5::File file = open_checkpoint(path, io);
  h5::QuietHdf5 quiet;
  CheckpointMeta meta;
  std::string error;
  try {
    meta = read_meta(file.id(), cat("checkpoint ", path));
  } catch (const Error& e) {
    error = e.what();
  }
  io.agree(error);
  return meta;
}

CheckpointMeta read_checkpoint_file(const std::string& path, const std::vector<ShardedTensor>& tensors,
                                    const UploadFn& upload, const Config& cfg, bool load_optimizer,
                                    const IoGroup& io) {
  h5::File file = open_checkpoint(path, io);
  h5::QuietHdf5 quiet;
  const std::string where = cat("checkpoint ", path);
  const std::vector<TableEntry> table = build_global_table(tensors, io);

  // Every rank checks the whole file the same way; agree() makes the outcome common
  // even if a rank's view of the file differed.
  CheckpointMeta meta;
  std::string error;
  try {
    meta = read_meta(file.id(), where);
  } catch (const Error& e) {
    error = e.what();
  }
  if (error.empty()) error = compare_models(cfg, meta, path);
  std::vector<Section> sections = {Section::Model};
  if (load_optimizer && meta.has_optimizer_state) sections.insert(sections.end(), {Section::OptimM, Section::OptimV});
  std::map<std::string, uint64_t> checksums;
  for (Section s : sections)
    if (error.empty()) error = check_group(file.id(), s, table, path, checksums);
  if (error.empty()) error = check_contents(file.id(), meta, path);
  io.agree(error);

  // Independent transfers: a rank's slabs are large contiguous extents (a chunk per
  // writer shard), which each rank reads straight from the file. Collective (two-phase)
  // reads measured 3-5x slower here (bench/bench_checkpoint.cpp, 4 ranks): aggregators
  // read for everyone and then redistribute. Every rank still opens every dataset, as
  // the collective metadata reads require.
  h5::PropertyList dxpl(h5::check(H5Pcreate(H5P_DATASET_XFER), where));
  if (io.uses_mpi_io()) h5::check_status(H5Pset_dxpl_mpio(dxpl.id(), H5FD_MPIO_INDEPENDENT), where);
  std::vector<float> local;
  std::vector<std::string> names;  // every dataset read, in order
  std::vector<uint64_t> sums;      // this rank's part of each one's checksum
  std::vector<std::vector<int64_t>> shapes;  // each one's global shape
  std::string nonfinite;           // the first bad value this rank found (NaN, inf, v < 0)
  for (Section section : sections) {
    for (const TableEntry& e : table) {
      const std::string name = cat(section_group(section), "/", e.name);
      const std::string ctx = cat(where, ": dataset ", name);
      h5::Dataset ds(H5Dopen2(file.id(), name.c_str(), H5P_DEFAULT));  // collective metadata read
      io.agree(ds.valid() ? "" : cat(ctx, ": ", h5::hdf5_error_text()));
      const ShardedTensor* mine = e.local >= 0 ? &tensors[e.local] : nullptr;
      if (mine) {
        // Elements outside the slabs (vocabulary padding) read as zero.
        int64_t covered = 0;
        for (const Slab& slab : mine->slabs) covered += slab.rows * slab.cols;
        if (covered < int64_t(mine->local_numel())) local.assign(mine->local_numel(), 0.0f);
        else local.resize(mine->local_numel());
      }
      const std::vector<int64_t> local_shape =
          mine ? local_shape_of(*mine) : std::vector<int64_t>(e.shape.size(), 1);
      // Independent reads: a rank may fail alone (a read, or its upload to the device)
      // without leaving the others in the next collective open; the group agrees first.
      std::string error;
      for (int k = 0; k < e.transfers; ++k) {
        const Slab* slab = mine && k < int(mine->slabs.size()) ? &mine->slabs[k] : nullptr;
        try {
          h5::transfer_slab(ds.id(), local_shape, slab, false, local.data(), dxpl.id(), ctx);
        } catch (const Error& err) {
          if (error.empty()) error = err.what();
        }
      }
      SlabDigest digest;
      if (mine && e.writes) {  // the first holder of this shard verifies it (checksum.h)
        digest = digest_slabs(local.data(), mine->local_cols, mine->slabs, e.shape.size() > 1 ? e.shape[1] : 1);
        if (nonfinite.empty()) nonfinite = check_values(name, section, digest, path);
      }
      names.push_back(name);
      shapes.push_back(e.shape);
      sums.push_back(digest.sum);
      try {
        if (mine && error.empty()) upload(section, e.local, local.data());
      } catch (const std::exception& err) {
        error = cat(ctx, ": ", err.what());
      }
      io.agree(error);
    }
  }
  // The group's partial sums against the stored checksums: the same verdict on every rank.
  io.sum(sums);
  for (size_t i = 0; i < names.size(); ++i)
    if (std::string problem = check_checksum(names[i], shapes[i], sums[i], checksums.at(names[i]), meta, path);
        !problem.empty())
      throw Error(problem);
  io.agree(nonfinite);
  return meta;
}

}  // namespace pptrain
