#include "data/read_only_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/input_file.h"

namespace pptrain::data {

ReadOnlyFile::ReadOnlyFile(const std::string& path, const std::string& what) : path_(path) {
  require_regular_file(path, what);
  // O_NONBLOCK: should the path have become a FIFO since the check, open returns at once
  // and fstat below refuses it (regular files ignore the flag).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(what, " ", path, ": cannot open (", std::strerror(errno), ")");
  struct stat info;
  if (::fstat(fd_, &info) != 0) {
    close();
    fail(what, " ", path, ": cannot stat (", std::strerror(errno), ")");
  }
  if (!S_ISREG(info.st_mode)) {
    close();
    fail(what, " ", path, ": not a regular file");
  }
  size_ = uint64_t(info.st_size);
}

ReadOnlyFile::~ReadOnlyFile() { close(); }

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void ReadOnlyFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void ReadOnlyFile::read_at(uint64_t offset, uint64_t n, void* out) const {
  auto end = checked_add(offset, n);
  if (!end || *end > uint64_t(INT64_MAX)) fail(path_, ": read of ", n, " bytes at byte ", offset, " is past any file size");
  auto* bytes = static_cast<unsigned char*>(out);
  uint64_t done = 0;
  while (done < n) {
    // At most 1 GiB per call: Linux transfers at most about 2 GiB per pread.
    const size_t chunk = size_t(std::min<uint64_t>(n - done, uint64_t(1) << 30));
    ssize_t got = ::pread(fd_, bytes + done, chunk, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path_, ": read failed at byte ", offset + done, " (", std::strerror(errno), ")");
    if (got == 0) {
      struct stat info;
      const long long now = ::fstat(fd_, &info) == 0 ? (long long)info.st_size : -1;
      fail(path_, ": truncated while in use (now ", now, " bytes; reading bytes [", offset, ", ", *end, "))");
    }
    done += uint64_t(got);
  }
}

}  // namespace pptrain::data
