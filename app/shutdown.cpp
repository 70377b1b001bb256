#include "app/shutdown.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>

namespace cutrain {
namespace {

static_assert(std::atomic<int64_t>::is_always_lock_free, "the signal handler needs a lock-free clock value");

// Signals this close to the first are the same request (SIGINT and SIGTERM sent together).
constexpr int64_t kTogetherNs = 1'000'000'000;

volatile std::sig_atomic_t g_signal = 0;
std::atomic<int64_t> g_first_ns{0};  // when the first came (lock-free, so usable in a handler)

int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void on_signal(int sig) {
  const int64_t now = monotonic_ns();
  if (g_signal != 0) {
    if (now - g_first_ns.load() < kTogetherNs) return;
    _exit(128 + sig);  // a second request: no more waiting
  }
  g_first_ns.store(now);
  g_signal = sig;
}

}  // namespace

void install_shutdown_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);  // a closed terminal or session: stop as for SIGTERM, saving
}

void request_shutdown(int sig) {
  if (g_signal != 0) return;
  g_first_ns.store(monotonic_ns());
  g_signal = sig;
}

bool shutdown_requested() { return g_signal != 0; }
int shutdown_signal() { return g_signal; }

}  // namespace cutrain
