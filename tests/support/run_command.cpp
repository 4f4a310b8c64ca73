// run_command: runs a shell command with a deadline. When the deadline passes, it says
// which processes of the command were still alive and where each one was (the ranks of
// an mpirun job by rank, with a backtrace of every thread when gdb is installed), then
// ends them all. A hang thus fails a test with the place it hung, not a bare timeout.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "support/test_util.h"

namespace pptrain::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_proc(int pid, const char* what) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + what, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parent pid from /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold spaces).
int parent_of(int pid) {
  std::string stat = read_proc(pid, "stat");
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  int ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

// Every live descendant of `root`, parents before children.
std::vector<int> descendants(int root) {
  std::multimap<int, int> children;  // ppid -> pid
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    int pid = std::stoi(name);
    children.emplace(parent_of(pid), pid);
  }
  std::vector<int> out;
  std::vector<int> todo{root};
  while (!todo.empty()) {
    int p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

// The MPI rank of a process started by mpirun (Open MPI and PMIx set these), or "".
std::string mpi_rank_of(int pid) {
  std::string env = read_proc(pid, "environ");
  for (const char* key : {"OMPI_COMM_WORLD_RANK=", "PMIX_RANK="}) {
    size_t at = 0;
    while ((at = env.find(key, at)) != std::string::npos) {
      if (at == 0 || env[at - 1] == '\0') return env.substr(at + strlen(key), env.find('\0', at) - at - strlen(key));
      ++at;
    }
  }
  return "";
}

std::string command_line(int pid) {
  std::string cmd = read_proc(pid, "cmdline");
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
  return cmd;
}

bool have_gdb() { return std::system("command -v gdb >/dev/null 2>&1") == 0; }

// Where `pid` is: the frames of every thread from gdb, else the kernel's wait channel.
std::string where_is(int pid, bool gdb) {
  if (gdb) {
    std::string cmd = "timeout 20 gdb -nx -batch -p " + std::to_string(pid) +
                      " -ex 'thread apply all bt 16' 2>/dev/null </dev/null";
    std::string frames;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char line[1024];
      while (fgets(line, sizeof line, p))
        if (line[0] == '#' || std::strncmp(line, "Thread ", 7) == 0) {
          std::string frame(line);
          if (frame.size() > 200) frame = frame.substr(0, 196) + " ...\n";  // template-heavy frames
          frames += "      " + frame;
        }
      pclose(p);
    }
    if (!frames.empty()) return frames;
  }
  std::string wchan = read_proc(pid, "wchan");
  std::string syscall = read_proc(pid, "syscall");
  if (!syscall.empty() && syscall.back() == '\n') syscall.pop_back();
  return "      (no backtrace: gdb is not installed) wait channel '" + wchan + "', syscall '" + syscall + "'\n";
}

// The report printed when the deadline passes: one entry per live process of the command.
std::string describe_hang(int root, int timeout_s) {
  std::ostringstream out;
  out << "\n*** timed out after " << timeout_s << " s; still running:\n";
  const bool gdb = have_gdb();
  for (int pid : descendants(root)) {
    std::string rank = mpi_rank_of(pid);
    std::string cmd = command_line(pid);
    if (cmd.empty()) continue;  // exited meanwhile
    out << "  " << (rank.empty() ? "process" : "rank " + rank) << " (pid " << pid << "): " << cmd << "\n";
    // The launchers (sh, mpirun, timeout) only wait for their children; the ranks and
    // plain commands are where a hang is.
    const std::string exe = std::filesystem::path(cmd.substr(0, cmd.find(' '))).filename();
    if (exe == "sh" || exe == "mpirun" || exe == "orterun" || exe == "prterun" || exe == "timeout") continue;
    out << where_is(pid, gdb);
  }
  return out.str();
}

void signal_all(int root, int sig) {
  for (int pid : descendants(root)) kill(pid, sig);
  killpg(root, sig);
}

}  // namespace

CommandResult run_command(const std::string& command, int timeout_s) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed: " + command);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + command);
  if (pid == 0) {
    // Its own process group, so the whole tree can be signalled; no stdin, since mpirun
    // forwards its stdin to rank 0 and must not wait on the caller's.
    setpgid(0, 0);
    int null_in = open("/dev/null", O_RDONLY);
    dup2(null_in, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so it holds before the child runs
  close(fds[1]);

  std::string out;
  char buf[4096];
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  constexpr auto kGrace = std::chrono::seconds(5);  // from SIGTERM to SIGKILL, and after
  bool timed_out = false, killed = false;
  for (;;) {
    const auto now = Clock::now();
    if (!timed_out && now >= deadline) {
      timed_out = true;
      out += describe_hang(pid, timeout_s);
      signal_all(pid, SIGTERM);
    }
    if (timed_out && !killed && now >= deadline + kGrace) {
      killed = true;
      signal_all(pid, SIGKILL);
    }
    // Something outside the tree (a daemon) may still hold the pipe: stop reading.
    if (killed && now >= deadline + 2 * kGrace) break;
    const auto until = timed_out ? now + std::chrono::milliseconds(200) : deadline;
    int wait_ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count());
    pollfd p{fds[0], POLLIN, 0};
    int ready = poll(&p, 1, std::max(wait_ms, 1));
    if (ready <= 0) continue;  // timeout or EINTR: look at the clock again
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer closed: the command and its children are gone
    out.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return {124, out};
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, out};
}

}  // namespace pptrain::testing
