// trainer.h: `cutrain train`, the reference PyTorch DDP recipe in one process per device.
//
// One training step, on every rank at once (docs/how-it-works.md follows it in detail):
//   1. feed:      batch b of this rank's sampler order into the model's input (app/batch_feed.h)
//   2. buffers:   without --sync-bn, BN running statistics are broadcast from rank 0 (DDP's default)
//   3. forward:   ResNet-18, softmax cross-entropy (nn/resnet.h)
//   4. backward:  gradients into the flat buffer; each finished bucket is all-reduced at once,
//                 overlapped with the rest of backward (dist/reducer.h)
//   5. update:    SGD over the flat buffers once all buckets are averaged (nn/sgd.h)
// On the GPU, steps 2-5 are captured once as a CUDA graph and replayed (--cuda-graphs on), and the
// host only waits for the device when it logs.
#pragma once

#include "app/train_options.h"

namespace cutrain {

// Runs training to the end, to --max-steps, or to a signal; returns the process exit status.
// Throws std::runtime_error with one line for bad input (data, flags, checkpoints, devices).
int run_training(const TrainOptions& options);

}  // namespace cutrain
