#include "checkpoint/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace pptrain {

std::string DirLock::acquire(const std::string& dir) {
  if (held()) return "";
  const std::string path = dir + "/.lock";
  // O_NOFOLLOW: a link planted as .lock is not followed to truncate whatever it names.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return cat("cannot open '", path, "': ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return cat("cannot lock '", path, "': ", std::strerror(err));
    std::string who = n > 0 ? std::string(holder, size_t(n)) : std::string("another process");
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    return cat("is in use by another run (", who, ", holding '", path,
               "'); two runs writing one folder would take each other's files: give this run another "
               "checkpoint.dir, or wait for that one to end");
  }
  char host[256] = "unknown-host";
  ::gethostname(host, sizeof host - 1);
  char since[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm_now;
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", ::localtime_r(&now, &tm_now));
  const std::string text = cat("host ", host, " pid ", ::getpid(), " since ", since, "\n");
  // The text is for people; the lock is the flock. A failed write loses only the text.
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, text.data(), text.size(), 0);
  fd_ = fd;
  return "";
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace pptrain
