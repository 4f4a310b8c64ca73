// ReadOnlyFile: an open regular file read with pread (RAII). Token shards are read this
// way rather than memory-mapped: a mapped file that another process truncates kills the
// reader with SIGBUS on the next access, while a pread past the new end returns short and
// becomes one line naming the file and offset. Ranks on one node still share the page
// cache (pread copies out of the kernel's one cached copy of the file), and the copy costs
// little: a training step reads one sequence of T+1 tokens per batch row.
#pragma once
#include <cstdint>
#include <string>

namespace pptrain::data {

class ReadOnlyFile {
 public:
  ReadOnlyFile() = default;
  // Opens `path`, which must be a regular file (a FIFO is refused without blocking).
  // `what` names the file's role in messages ("token shard"). Throws pptrain::Error.
  ReadOnlyFile(const std::string& path, const std::string& what);
  ~ReadOnlyFile();
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  // The size when the file was opened.
  uint64_t size() const { return size_; }
  // Reads bytes [offset, offset + n) into out[n]. Throws "PATH: truncated while in use (now
  // S bytes; reading bytes [A, B))" when the file is shorter now.
  void read_at(uint64_t offset, uint64_t n, void* out) const;

 private:
  void close();
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace pptrain::data
