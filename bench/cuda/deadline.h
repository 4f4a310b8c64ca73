// Deadline: ends the process when one phase of a device program runs past its time.
//
// A kernel that never ends (an mbarrier waited for with the wrong phase, a ring of stages out
// of step between producer and consumers) holds the host in its next synchronisation, and
// nothing inside the process can take the GPU back from it. On a node lent for minutes, an
// outside `timeout` then spends the whole visit on one hung kernel. arm(what, seconds)
// before a phase and disarm() after it: past the time a watcher thread prints `line(what)`
// (one JSON line naming the phase) to stdout and exits the process with status 3 at once,
// without destructors (the CUDA context goes with the process; a clean teardown could hang
// on the same kernel). seconds <= 0 arms nothing.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace pptrain {

class Deadline {
 public:
  // `line` turns the phase's name and the seconds it had into the line printed on expiry.
  explicit Deadline(std::function<std::string(const std::string& what, double seconds)> line)
      : line_(std::move(line)), watcher_([this] { watch(); }) {}
  ~Deadline() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_one();
    watcher_.join();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  void arm(const std::string& what, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = seconds > 0;
    what_ = what;
    seconds_ = seconds;
    if (armed_)
      until_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    changed_.notify_one();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
    changed_.notify_one();
  }

 private:
  using Clock = std::chrono::steady_clock;
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        changed_.wait(lock);
        continue;
      }
      if (changed_.wait_until(lock, until_) == std::cv_status::timeout && armed_ && Clock::now() >= until_) {
        std::printf("%s\n", line_(what_, seconds_).c_str());
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
  }

  std::function<std::string(const std::string&, double)> line_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false, stop_ = false;
  std::string what_;
  double seconds_ = 0;
  Clock::time_point until_;
  std::thread watcher_;  // last: started once the members it reads exist
};

}  // namespace pptrain
