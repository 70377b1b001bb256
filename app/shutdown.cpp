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
volatile std::sig_atomic_t g_sender = 0;  // the pid that sent it; 0 for the kernel (a terminal's ^C)
volatile std::sig_atomic_t g_from_job = 0;
std::atomic<int64_t> g_first_ns{0};  // when the first came (lock-free, so usable in a handler)

int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void on_signal(int sig, siginfo_t* info, void*) {
  const int64_t now = monotonic_ns();
  if (g_signal != 0) {
    if (now - g_first_ns.load() < kTogetherNs) return;
    _exit(128 + sig);  // a second request: no more waiting
  }
  g_first_ns.store(now);
  // Note [A signal to one rank]: from the launcher (the parent: cutrun, torchrun's agent, Slurm's
  // step daemon) or the kernel (a terminal), a signal is the job's stop.
  const bool from_kernel = info == nullptr || info->si_code == SI_KERNEL || info->si_pid == 0;
  g_sender = from_kernel ? 0 : info->si_pid;
  g_from_job = from_kernel || info->si_pid == ::getppid();
  g_signal = sig;
}

}  // namespace

void install_shutdown_handlers() {
  struct sigaction action {};
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);  // a closed terminal or session: stop as for SIGTERM, saving
}

void request_shutdown(int sig) {
  if (g_signal != 0) return;
  g_first_ns.store(monotonic_ns());
  g_from_job = 1;
  g_signal = sig;
}

bool shutdown_requested() { return g_signal != 0; }
int shutdown_signal() { return g_signal; }
bool shutdown_from_job() { return g_from_job != 0; }
int shutdown_sender() { return g_sender; }

}  // namespace cutrain
