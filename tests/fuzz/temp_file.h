// For fuzz targets whose code under test reads a file: one temporary regular file per
// process, rewritten with each input (removed when the process exits normally).
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pptrain::fuzz {

class TempFile {
 public:
  explicit TempFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/pptrain-fuzz-XXXXXX" + suffix;
    fd_ = ::mkstemps(path_.data(), int(std::string(suffix).size()));
    if (fd_ < 0) {
      std::perror("pptrain-fuzz: mkstemps");
      std::abort();
    }
  }
  ~TempFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Replaces the file's contents with data[size]; returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd_, data + done, size - done, off_t(done));
      if (n <= 0) std::abort();
      done += size_t(n);
    }
    return path_;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace pptrain::fuzz
