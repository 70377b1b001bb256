// run_end.h: how a run ends early: a signal stops a training run gracefully, and the failure of
// any command is written down for the launcher.
//
// SIGINT, SIGTERM and SIGHUP end a training run gracefully. The first signal only raises a flag:
// the trainer finishes the step (or evaluation batch) it is in, all ranks agree to stop at the same
// step, rank 0 saves a checkpoint, and every rank exits with status 0. Signals within a second of
// the first are the same request; a later one exits at once (status 128 + signal), for a run that
// is stuck. The trainer installs the handlers once its ranks have met: a signal during the
// rendezvous, when there is nothing to save, ends the process at once, where the rendezvous would
// have held it until its timeout.
//
// A failed rank tells its launcher when and why it failed, as torchrun's error files do. cutrun
// gives every rank CUTRAIN_ERROR_FILE, a path in a folder of its own. The first failure writes
// "<Unix time in ns> <message>" there as soon as it is caught, before the rank tears down its
// communicator: a peer that fails because this rank went away fails later, even when it exits
// sooner (a rank on a full disk may take longer to exit than the rank whose collective it broke).
// cutrun names the rank whose failure came first. Without the variable this does nothing.
//
// torchrun gives every worker TORCHELASTIC_ERROR_FILE, where it reads the JSON record of
// torch/distributed/elastic/multiprocessing/errors/error_handler.py:
//   {"message": {"message": "cutrain: error: ...", "extraInfo": {"py_callstack": "cutrain: error: ...",
//                                                                "timestamp": "<Unix time in s>"}}}
// so that its summary of a failed job shows cutrain's error line, not "error_file: <N/A>".
#pragma once

#include <string>

namespace cutrain {

// Also for the signals that TORCHELASTIC_SIGNALS_TO_HANDLE names (Note [torchrun's signals to
// handle] in app/run_end.cpp); throws, naming it, for a name that is not a signal that can be handled.
void install_shutdown_handlers();

// True once one of them has arrived (async-signal-safe flag, read by the training loop).
bool shutdown_requested();

// Which signal asked for the shutdown (0 if none), for the closing message.
int shutdown_signal();

// Note [A signal to one rank]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A signal from the launcher (this process's parent: cutrun, torchrun's agent, Slurm's step
// daemon), from the kernel (a terminal's ^C, which reaches every process of the job), or one that
// request_shutdown stands in for, is the job's stop: every rank saves, as above, and exits with 0.
// A signal that only some ranks had from anyone else (a user's `kill` of one rank's pid) stops
// the job as well, and rank 0 still saves, but for the ranks that had it the stop is a failure:
// they say so and exit with 128 + signal, so that the launcher names them and restarts the job
// within --max-restarts, and a scheduler does not take an unfinished run for a finished one. The
// other ranks say which rank stopped them. (Where every rank had one, from anyone, it is the job's
// stop too: a signal to the job's process group.)
//
// Whether the signal came from the launcher or the kernel (see Note [A signal to one rank]).
bool shutdown_from_job();
// The pid that sent the signal, or 0 for the kernel and request_shutdown.
int shutdown_sender();

// Asks for the shutdown as `sig` would, from any thread, without a signal (the launcher is gone).
void request_shutdown(int sig);

// Writes this rank's error files, those of CUTRAIN_ERROR_FILE and TORCHELASTIC_ERROR_FILE that are
// set, if none is written yet (the first failure is the one that counts).
void write_error_file(const std::string& message);

}  // namespace cutrain
