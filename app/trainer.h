// trainer.h: `cutrain train`, the reference PyTorch DDP recipe in one process per device.
//
// Each step loads batch b of this rank's sampler order into the model's input, then runs Note
// [The step] in app/train_step.h. On the GPU the step is captured once as a CUDA graph and
// replayed (--cuda-graphs on), and the host waits for the device only when it logs, evaluates or
// saves. docs/how-it-works.md follows a step in detail.
#pragma once

#include "app/train_options.h"

namespace cutrain {

// Runs training to the end, to --max-steps, or to a signal; returns the process exit status.
// Throws std::runtime_error with one line for bad input (data, flags, checkpoints, devices).
int run_training(const TrainOptions& options);

}  // namespace cutrain
