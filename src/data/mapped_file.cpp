#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace pptrain::data {

namespace {
// Closes the descriptor on every exit path; the mapping outlives it.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

MappedFile::MappedFile(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail(path, ": cannot open (", std::strerror(errno), ")");
  struct stat info;
  if (::fstat(file.fd, &info) != 0) fail(path, ": cannot stat (", std::strerror(errno), ")");
  if (!S_ISREG(info.st_mode)) fail(path, ": not a regular file");
  size_ = size_t(info.st_size);
  if (size_ == 0) return;  // mmap of length 0 is invalid; an empty file maps to nothing
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (p == MAP_FAILED) fail(path, ": cannot map (", std::strerror(errno), ")");
  data_ = static_cast<const unsigned char*>(p);
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace pptrain::data
