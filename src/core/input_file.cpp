#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace pptrain {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uint64_t require_regular_file(const std::string& path, const std::string& what) {
  struct stat info;
  // stat, not open: opening a FIFO for reading blocks until a writer appears.
  if (::stat(path.c_str(), &info) != 0)
    fail(what, " ", path, ": cannot open (", std::strerror(errno), ")");
  if (!S_ISREG(info.st_mode)) fail(what, " ", path, ": is ", kind_of(info.st_mode), " (expected a regular file)");
  return uint64_t(info.st_size);
}

std::string read_small_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  require_regular_file(path, what);
  // O_NONBLOCK: should the path have been swapped for a FIFO since the stat, open returns
  // at once instead of waiting for a writer; fstat below then refuses it.
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) fail(what, " ", path, ": cannot open (", std::strerror(errno), ")");
  struct stat info;
  if (::fstat(file.fd, &info) != 0) fail(what, " ", path, ": cannot stat (", std::strerror(errno), ")");
  if (!S_ISREG(info.st_mode)) fail(what, " ", path, ": is ", kind_of(info.st_mode), " (expected a regular file)");
  if (uint64_t(info.st_size) > max_bytes)
    fail(what, " ", path, ": ", info.st_size, " bytes, more than the ", max_bytes, " a ", what, " may have");
  std::string text(size_t(info.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::pread(file.fd, text.data() + done, text.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(what, " ", path, ": read failed (", std::strerror(errno), ")");
    if (n == 0) break;  // the file shrank while being read: take what is there
    done += size_t(n);
  }
  text.resize(done);
  return text;
}

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> checked_product(std::initializer_list<int64_t> factors) {
  uint64_t r = 1;
  for (int64_t f : factors) {
    if (f < 0) return std::nullopt;
    auto next = checked_mul(r, uint64_t(f));
    if (!next) return std::nullopt;
    r = *next;
  }
  return r;
}

}  // namespace pptrain
