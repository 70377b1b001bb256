// process.h: starting real processes from tests (cutrun, cutrain, and the programs they run).
//
//   Process p({cutrain::test::binary("cutrun"), "--nproc-per-node", "2", "sh", "-c", "echo hi"});
//   p.read_until("hi");          // optional: wait for some output
//   Process::Result r = p.finish();   // all output (stdout and stderr together), exit status
//
// Multi-process tests run this test binary itself under cutrun with a hidden tag, e.g.
//   cutrun --standalone --nproc-per-node 3 cutrain_tests "[.dist-worker-collectives]"
// and the hidden test case does one rank's part, reading RANK and WORLD_SIZE from the environment.
//
// A started process dies with the test (PR_SET_PDEATHSIG), so a test killed at CTest's timeout
// leaves nothing behind; start them from the test's own thread, since the kernel ties that signal
// to the thread that forked.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/binaries.h"
#include "tests/temp_dir.h"

namespace cutrain::test {

class Process {
 public:
  struct Result {
    std::string output;
    int exit_code = -1;  // when it exited
    int signal = 0;      // when a signal ended it
    double seconds = 0;  // from start to end
  };

  explicit Process(const std::vector<std::string>& argv) : start_(std::chrono::steady_clock::now()) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const pid_t test = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // The child dies with the test, however the test ends: when CTest kills a test at its
      // timeout (SIGKILL, no destructor runs), what the test started goes too. (cutrun does the
      // same for its ranks.) The test may have died before prctl: then go at once.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != test) ::_exit(127);
      ::dup2(pipe_fds[1], 1);
      ::dup2(pipe_fds[1], 2);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(pipe_fds[1]);
    output_fd_ = pipe_fds[0];
  }

  Process(const Process&) = delete;  // one owner kills and reaps it
  Process& operator=(const Process&) = delete;

  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (output_fd_ >= 0) ::close(output_fd_);
  }

  // Reads output until it contains `text` `times` times, or until `seconds` pass from this call (a deadline of
  // last resort, generous so that a loaded machine does not trip it); returns whether it did.
  bool read_until(const std::string& text, size_t times = 1, int seconds = 20) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    for (;;) {
      if (count(text) >= times) return true;
      if (!read_some(deadline)) return false;
    }
  }

  // The output read so far.
  const std::string& output() const { return output_; }

  void signal(int signum) { ::kill(pid_, signum); }
  pid_t pid() const { return pid_; }

  // Reads the rest of the output and waits for the process to end.
  Result finish() {
    while (read_some(std::chrono::steady_clock::time_point::max())) {
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    Result r;
    r.output = output_;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    return r;
  }

  // How many times `text` is in the output read so far.
  size_t count(const std::string& text) const {
    size_t n = 0;
    for (size_t at = output_.find(text); at != std::string::npos; at = output_.find(text, at + 1)) ++n;
    return n;
  }

 private:
  // One chunk of output; false at the end of output or at the deadline.
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    auto now = std::chrono::steady_clock::now();
    int wait_ms = deadline == std::chrono::steady_clock::time_point::max()
                      ? -1
                      : int(std::max<long long>(
                            0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()));
    pollfd p{output_fd_, POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) return false;
    char chunk[4096];
    ssize_t n = ::read(output_fd_, chunk, sizeof chunk);
    if (n <= 0) return false;
    output_.append(chunk, size_t(n));
    return true;
  }

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
  std::chrono::steady_clock::time_point start_;
};

inline Process::Result run(const std::vector<std::string>& argv) { return Process(argv).finish(); }

// cutrun --standalone --nproc-per-node N <this test binary> "<tag>": every rank runs one hidden test.
inline Process::Result run_test_workers(int nproc, const std::string& tag) {
  return run({cutrain::test::binary("cutrun"), "--standalone", "--nproc-per-node", std::to_string(nproc),
              cutrain::test::binary("cutrain_tests"), tag});
}

namespace detail {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The state letter and parent of /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold
// spaces, so read after its ')'), or false when there is no such process.
inline bool stat_of(const std::filesystem::path& proc_dir, char& state, pid_t& ppid) {
  const std::string stat = read_text(proc_dir / "stat");
  std::istringstream after(stat.substr(std::min(stat.size(), stat.rfind(')') + 1)));
  return bool(after >> state >> ppid);
}

}  // namespace detail

// The CPU time that process `pid` has used so far, all its threads together, in clock ticks
// (sysconf(_SC_CLK_TCK) a second), or -1 when there is no such process. Unlike the time on a clock, it
// marks a point in the process's own work, wherever a loaded machine puts it.
inline long long cpu_ticks(pid_t pid) {
  const std::string stat = detail::read_text("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream after(stat.substr(std::min(stat.size(), stat.rfind(')') + 1)));
  std::string skipped;  // state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt, majflt, cmajflt
  for (int field = 0; field < 11; ++field) after >> skipped;
  long long user = 0, system = 0;
  return after >> user >> system ? user + system : -1;
}

// Waits until process `pid` has used `ticks` more CPU time than at the call (cpu_ticks), which marks a point
// in its work however loaded the machine is; returns false when the process ended first.
inline bool wait_cpu_ticks(pid_t pid, long long ticks) {
  const long long start = cpu_ticks(pid);
  for (long long now = start; now >= 0; now = cpu_ticks(pid)) {
    if (now >= start + ticks) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Waits until signal `signum`, sent to process `pid`, is no longer pending there, that is until a thread
// took it (its handler began), or until `seconds` pass (a deadline of last resort); returns whether it was
// taken. The kernel hands pending signals over lowest number first, so a test that sends a higher-numbered
// signal first waits here before it sends the next.
inline bool wait_taken(pid_t pid, int signum, int seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  const unsigned long long bit = 1ull << (signum - 1);
  while (std::chrono::steady_clock::now() < deadline) {
    std::istringstream status(detail::read_text("/proc/" + std::to_string(pid) + "/status"));
    unsigned long long pending = 0;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) pending |= std::stoull(line.substr(7), nullptr, 16);
    if (!(pending & bit)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Whether process `pid` still runs; a zombie, dead but not yet reaped by its parent, does not.
inline bool running(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  return detail::stat_of("/proc/" + std::to_string(pid), state, ppid) && state != 'Z';
}

// Waits up to `seconds` until none of `pids` runs; returns whether that happened.
inline bool wait_gone(const std::vector<pid_t>& pids, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (std::none_of(pids.begin(), pids.end(), running)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The processes `parent` (cutrun) started, by their RANK variable.
inline std::map<int, pid_t> ranks_of(pid_t parent) {
  std::map<int, pid_t> ranks;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    char state = 0;
    pid_t ppid = 0;
    if (!detail::stat_of(entry.path(), state, ppid) || ppid != parent) continue;
    const std::string environ = detail::read_text(entry.path() / "environ");
    for (size_t at = 0; at < environ.size(); at = environ.find('\0', at) + 1) {
      if (environ.compare(at, 5, "RANK=") == 0) ranks[std::stoi(environ.substr(at + 5))] = pid_t(std::stoi(name));
      if (environ.find('\0', at) == std::string::npos) break;
    }
  }
  return ranks;
}

// ranks_of once it finds `count` ranks, or what it finds after `seconds`. A rank inside an exec (a
// shell's `exec sleep`, say) shows /proc no environment for that moment, and one look-up misses it.
inline std::map<int, pid_t> wait_ranks_of(pid_t parent, size_t count, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::map<int, pid_t> ranks = ranks_of(parent);
    if (ranks.size() >= count || std::chrono::steady_clock::now() > deadline) return ranks;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Note [Holding ranks still]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A test that saw ranks at work (a step line) and then looks them up to signal one races them: on a
// loaded machine the ranks may have moved on by then, to the end of the job or into a restart, and a
// rank found by the look-up may be gone before its signal. HeldRanks stops every rank of a cutrun with
// SIGSTOP and waits until /proc shows each one stopped, so that the ranks it holds are the ones a test
// acts on, where they were; at its end it continues them (SIGCONT). A rank that ended before it could be
// stopped is not held, and a test that needs it fails there, naming the ranks it found.
class HeldRanks {
 public:
  explicit HeldRanks(pid_t cutrun) {
    for (const auto& [rank, pid] : ranks_of(cutrun)) {
      ::kill(pid, SIGSTOP);
      ranks_[rank] = pid;
    }
    // SIGSTOP takes effect at the rank's next scheduling, which a loaded machine may delay; a rank that
    // ends meanwhile is a zombie or gone.
    for (auto it = ranks_.begin(); it != ranks_.end();) {
      char state = 0;
      pid_t ppid = 0;
      const std::string dir = "/proc/" + std::to_string(it->second);
      while (detail::stat_of(dir, state, ppid) && state != 'T' && state != 'Z')
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      it = state == 'T' ? std::next(it) : ranks_.erase(it);
    }
  }
  HeldRanks(const HeldRanks&) = delete;
  HeldRanks& operator=(const HeldRanks&) = delete;
  ~HeldRanks() {
    for (const auto& [rank, pid] : ranks_) ::kill(pid, SIGCONT);
  }

  // The ranks held, by their RANK variable.
  const std::map<int, pid_t>& ranks() const { return ranks_; }

 private:
  std::map<int, pid_t> ranks_;
};

}  // namespace cutrain::test
