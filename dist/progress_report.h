// progress_report.h: a rank's heartbeat to cutrun, which watches for a rank that stalls.
//
// cutrun (app/cutrun.py) hands every rank one end of a datagram socket as CUTRAIN_PROGRESS_FD and a
// period as CUTRAIN_PROGRESS_EVERY_MS. A thread of the rank's own then sends "<rank> <step>" every
// period, whatever the training thread is doing: while one rank is stopped (SIGSTOP, a debugger)
// or frozen, the others wait for it inside a collective but their heartbeats go on, so cutrun sees
// which rank fell silent and stops the job, naming it. Without those variables (another launcher,
// a single process) this does nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace cutrain {

class ProgressReport {
 public:
  explicit ProgressReport(int rank);
  ~ProgressReport();
  ProgressReport(const ProgressReport&) = delete;
  ProgressReport& operator=(const ProgressReport&) = delete;

  // The optimizer steps done so far; the next heartbeat carries it. Costs one atomic store.
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }

 private:
  void beat();  // the heartbeat thread

  int rank_;
  int fd_ = -1;
  std::chrono::milliseconds every_{1000};
  std::atomic<int64_t> step_{0};
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cutrain
