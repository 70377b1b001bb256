// failure_record.h: a failed rank tells its launcher when and why it failed, as torchrun's error
// files do.
//
// cutrun gives every rank CUTRAIN_ERROR_FILE, a path in a folder of its own. The first failure
// writes "<Unix time in ns> <message>" there as soon as it is caught, before the rank tears down
// its communicator: a peer that fails because this rank went away fails later, even when it exits
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

// Writes the failure record if none is written yet (the first failure is the one that counts).
void record_failure(const std::string& message);

}  // namespace cutrain
