#include "dist/launch/progress_report.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

#include "dist/launch/store_protocol.h"

namespace cutrain {
namespace {

// The non-negative integer in environment variable `name`, or nothing when unset or not one.
std::optional<int64_t> env_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  std::optional<int64_t> value = parse_decimal(text);
  if (!value || *value < 0) return std::nullopt;
  return value;
}

// How many WaitingOnPeers exist in this process.
std::atomic<int> g_waiting_on_peers{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

WaitingOnPeers::WaitingOnPeers() { g_waiting_on_peers.fetch_add(1, std::memory_order_relaxed); }
WaitingOnPeers::~WaitingOnPeers() { g_waiting_on_peers.fetch_sub(1, std::memory_order_relaxed); }

ProgressReport::ProgressReport(int rank, std::function<void()> on_launcher_gone)
    : rank_(rank), on_launcher_gone_(std::move(on_launcher_gone)) {
  std::optional<int64_t> fd = env_number("CUTRAIN_PROGRESS_FD");
  std::optional<int64_t> every = env_number("CUTRAIN_PROGRESS_EVERY_MS");
  if (!fd || *fd > INT32_MAX || ::fcntl(int(*fd), F_SETFD, FD_CLOEXEC) != 0) return;  // not under cutrun's watch
  fd_ = int(*fd);
  if (every && *every > 0) every_ = std::chrono::milliseconds(*every);
  thread_ = std::thread([this] { beat(); });
}

ProgressReport::~ProgressReport() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  thread_.join();
}

void ProgressReport::mark() {
  const int64_t now = now_ns();
  const int64_t last = last_mark_ns_.load(std::memory_order_relaxed);
  if (last >= 0) {
    const int64_t gap_ms = (now - last) / 1000000;
    if (gap_ms > longest_ms_.load(std::memory_order_relaxed)) longest_ms_.store(gap_ms, std::memory_order_relaxed);
  }
  last_mark_ns_.store(now, std::memory_order_relaxed);
}

void ProgressReport::beat() {
  std::unique_lock<std::mutex> lock(mutex_);
  do {
    const int64_t last = last_mark_ns_.load(std::memory_order_relaxed);
    const bool excused = last < 0 || g_waiting_on_peers.load(std::memory_order_relaxed) > 0;
    const int64_t quiet_ms = excused ? 0 : (now_ns() - last) / 1000000;
    const std::string message = std::to_string(rank_) + " " + std::to_string(step_.load(std::memory_order_relaxed)) +
                                " " + std::to_string(longest_ms_.load(std::memory_order_relaxed)) + " " +
                                std::to_string(quiet_ms);
    // Never blocks and never raises SIGPIPE: when cutrun is behind, a heartbeat is lost.
    if (::send(fd_, message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == ECONNREFUSED) {
      if (on_launcher_gone_) on_launcher_gone_();
      return;
    }
  } while (!stop_.wait_for(lock, every_, [this] { return stopping_; }));
}

}  // namespace cutrain
