// MappedFile: a read-only memory map of a whole file (RAII). Token shards are mapped
// rather than read, so ranks on one node share the page cache and a large dataset
// costs no resident memory beyond what the OS keeps cached.
#pragma once
#include <cstddef>
#include <string>

namespace pptrain::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; throws pptrain::Error "PATH: cannot open (reason)" on failure.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void unmap();
  const unsigned char* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace pptrain::data
