// progress_report.h: a rank's heartbeat to cutrun, which watches for a rank that stalls.
//
// cutrun (dist/launch/cutrun.py) hands every rank one end of a datagram socket as CUTRAIN_PROGRESS_FD and a
// period as CUTRAIN_PROGRESS_EVERY_MS. A thread of the rank's own then sends
// "<rank> <step> <longest_ms> <quiet_ms>" every period. Without those variables (another launcher,
// a single process) this does nothing.
//
// Note [A heartbeat means progress]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A heartbeat alone says only that a thread is alive. The
// training thread may be blocked all the while (writing to a full pipe, say), so each heartbeat
// also says how long the training thread has gone without a mark: `quiet_ms`. It is 0 before the
// first mark, and while a collective of this process is in flight (a WaitingOnPeers exists): then
// the rank waits for others, and a rank that is stopped, frozen or blocked makes its peers wait
// inside a collective. So cutrun finds the one rank that stalls, by its silence (stopped, frozen)
// or by its quiet (blocked), and stops the job, naming it.
//
// A heartbeat that cutrun's end refuses (ECONNREFUSED: cutrun is gone, killed with SIGKILL, say)
// calls `on_launcher_gone` once and beating stops. The socket reaches a rank through whatever
// wrapper scripts started it, which cutrun's death signal does not: the trainer stops there as
// for SIGTERM, saving, instead of training on with parent pid 1.
//
// `longest_ms` is the longest time the training thread has gone between two marks (a step, an
// evaluation batch, a checkpoint written): what it may need to reach the next one. cutrun waits
// that long, twice, before it kills a rank it asked to stop (Note [A stop that saves]).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace cutrain {

class ProgressReport {
 public:
  explicit ProgressReport(int rank, std::function<void()> on_launcher_gone = {});
  ~ProgressReport();
  ProgressReport(const ProgressReport&) = delete;
  ProgressReport& operator=(const ProgressReport&) = delete;

  // The optimizer steps done so far; the next heartbeat carries it. A mark too.
  void set_step(int64_t step) {
    step_.store(step, std::memory_order_relaxed);
    mark();
  }
  // The training thread reached a point where it can act on a stop. The first mark starts the
  // clock; each later one measures the time since the one before. Costs a clock read.
  void mark();

 private:
  void beat();  // the heartbeat thread

  int rank_;
  std::function<void()> on_launcher_gone_;
  int fd_ = -1;
  std::chrono::milliseconds every_{1000};
  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> last_mark_ns_{-1};  // written by the training thread alone
  std::atomic<int64_t> longest_ms_{0};
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

// While one exists, a collective of this process is in flight: it waits for its peers, and its
// heartbeats say it is not quiet (Note [A heartbeat means progress]). The communicators make them.
class WaitingOnPeers {
 public:
  WaitingOnPeers();
  ~WaitingOnPeers();
  WaitingOnPeers(const WaitingOnPeers&) = delete;
  WaitingOnPeers& operator=(const WaitingOnPeers&) = delete;
};

}  // namespace cutrain
