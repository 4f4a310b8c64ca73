// DirLock: one run at a time writes a checkpoint folder. Two runs on one folder would each
// take the other's files for their own (a leftover .tmp removed, `latest` moved, files
// pruned by keep_last or moved to abandoned/). World rank 0 of a run holds an exclusive
// flock(2) on `DIR/.lock` from its resume to its end; the file says who holds it
// ("host HOST pid PID since TIME"), for the refusal of the next run. The kernel releases a
// flock when its holder dies, however it dies, so a crashed run leaves no stale lock (the
// file stays, and is taken over). On NFS, Linux maps flock to a byte-range lock that the
// server arbitrates between clients.
#pragma once
#include <string>

namespace pptrain {

class DirLock {
 public:
  DirLock() = default;
  // Takes the lock of `dir` (which exists) without waiting. Returns "" or the one-line
  // reason it cannot, naming the holder.
  std::string acquire(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace pptrain
