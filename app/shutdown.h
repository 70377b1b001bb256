// shutdown.h: SIGINT, SIGTERM and SIGHUP end a training run gracefully.
//
// The first signal only raises a flag: the trainer finishes the step (or evaluation batch) it is
// in, all ranks agree to stop at the same step, rank 0 saves a checkpoint, and every rank exits
// with status 0. Signals within a second of the first are the same request; a later one exits at
// once (status 128 + signal), for a run that is stuck. The trainer installs the handlers once its
// ranks have met: a signal during the rendezvous, when there is nothing to save, ends the process at
// once, where the rendezvous would have held it until its timeout.
#pragma once

namespace cutrain {

void install_shutdown_handlers();

// True once one of them has arrived (async-signal-safe flag, read by the training loop).
bool shutdown_requested();

// Which signal asked for the shutdown (0 if none), for the closing message.
int shutdown_signal();

// Asks for the shutdown as `sig` would, from any thread, without a signal (the launcher is gone).
void request_shutdown(int sig);

}  // namespace cutrain
