#include "app/run_end.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// The number of the signal named `name` ("SIGUSR1", as Python's signal module names it), or 0.
int signal_named(const std::string& name) {
  if (name.rfind("SIG", 0) != 0) return 0;
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbreviation = sigabbrev_np(sig);  // "USR1"
    if (abbreviation && name.compare(3, std::string::npos, abbreviation) == 0) return sig;
  }
  return 0;
}

// Note [torchrun's signals to handle]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torchrun's --signals-to-handle (default "SIGTERM,SIGINT,SIGHUP,SIGQUIT") sets
// TORCHELASTIC_SIGNALS_TO_HANDLE, which its workers inherit. Its agent catches those signals and
// passes the one it got to every worker, then waits 30 s before SIGKILL
// (torch/distributed/elastic/multiprocessing/api.py). So a rank stops for each of them as for SIGTERM:
// it finishes the step and rank 0 saves, where SIGQUIT's or SIGUSR1's default action ended it unsaved.
std::vector<int> torchrun_signals() {
  const char* names = std::getenv("TORCHELASTIC_SIGNALS_TO_HANDLE");
  std::vector<int> signals;
  if (names == nullptr) return signals;
  const std::string list = names;
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(at, end - at);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    const int sig = signal_named(name);
    if (sig == 0 || sig == SIGKILL || sig == SIGSTOP)
      throw std::runtime_error("TORCHELASTIC_SIGNALS_TO_HANDLE='" + list + "' names '" + name +
                               "', which is not a signal that can be handled (torchrun's --signals-to-handle takes "
                               "names such as SIGTERM,SIGUSR1)");
    signals.push_back(sig);
    at = end + 1;
  }
  return signals;
}

// Writes `text` to the file named by `variable`, unless it is unset or the file exists already:
// a second failure (the one unwinding from the first) leaves the first's record. Best effort: the
// launchers fall back to the order of exits, or to the exit status.
void write_once(const char* variable, const std::string& text) {
  const char* path = std::getenv(variable);
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

}  // namespace

void install_shutdown_handlers() {
  std::vector<int> signals = {SIGINT, SIGTERM, SIGHUP};       // SIGHUP: a closed terminal or session
  for (int sig : torchrun_signals()) signals.push_back(sig);  // Note [torchrun's signals to handle]
  struct sigaction action {};
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (int sig : signals) sigaction(sig, &action, nullptr);
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

void write_error_file(const std::string& message) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  write_once("CUTRAIN_ERROR_FILE", std::to_string(ns) + " " + message + "\n");
  // torchrun's summary shows extraInfo.py_callstack where the record has one, else the message;
  // cutrain has no Python stack, so both are its error line.
  const std::string line = "cutrain: error: " + message;
  const nlohmann::json record = {
      {"message",
       {{"message", line},
        {"extraInfo",
         {{"py_callstack", line},
          {"timestamp", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count())}}}}}};
  write_once("TORCHELASTIC_ERROR_FILE", record.dump());
}

}  // namespace cutrain
