// Helpers of the checkpoint tests: reading and editing checkpoint files with the plain
// HDF5 C API (independently of pptrain's reader), and small text checks.
#pragma once
#include <hdf5.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace pptrain::testing {

// A whole float32 dataset of a file, row-major; throws when it cannot be read.
inline std::vector<float> read_h5_floats(const std::string& file, const std::string& dataset,
                                         std::vector<hsize_t>* shape = nullptr) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + file);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  if (d < 0) {
    H5Fclose(f);
    throw std::runtime_error("no dataset " + dataset + " in " + file);
  }
  hid_t s = H5Dget_space(d);
  std::vector<hsize_t> dims(H5Sget_simple_extent_ndims(s));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  std::vector<float> out(n);
  herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  if (rc < 0) throw std::runtime_error("cannot read " + dataset + " of " + file);
  if (shape) *shape = dims;
  return out;
}

// Opens `file` read-write, runs `edit(file_id)`, closes it.
template <typename Edit>
void edit_h5(const std::string& file, Edit edit) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + file + " for writing");
  edit(f);
  H5Fclose(f);
}

// Replaces `dataset` by one of `type` and `shape` (zeros).
inline void replace_dataset(hid_t f, const std::string& dataset, hid_t type, const std::vector<hsize_t>& shape) {
  if (H5Lexists(f, dataset.c_str(), H5P_DEFAULT) > 0) H5Ldelete(f, dataset.c_str(), H5P_DEFAULT);
  hid_t s = H5Screate_simple(int(shape.size()), shape.data(), nullptr);
  hid_t d = H5Dcreate2(f, dataset.c_str(), type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(d);
  H5Sclose(s);
}

// A tmpfs of `bytes` mounted at `dir` for the object's lifetime, where the system
// permits it (root, or a user namespace with mount rights); `error` says why not. A
// real full disk for the tests of failed saves.
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& dir, uint64_t bytes) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0) mounted_ = true;
    else error = std::string("mount -t tmpfs is not permitted here: ") + std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  bool mounted() const { return mounted_; }
  std::string error;

 private:
  std::string dir_;
  bool mounted_ = false;
};

inline int count_occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

}  // namespace pptrain::testing
