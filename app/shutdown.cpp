#include "app/shutdown.h"

#include <unistd.h>

#include <csignal>

namespace cutrain {
namespace {

volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  if (g_signal != 0) _exit(128 + sig);  // second signal: no more waiting
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

bool shutdown_requested() { return g_signal != 0; }
int shutdown_signal() { return g_signal; }

}  // namespace cutrain
