// model_ema.h: an exponential moving average of a model's parameters and batch norm statistics,
// torchvision's ExponentialMovingAverage (`--model-ema` of its reference script: an AveragedModel
// with use_buffers=True), kept in flat fp32 arrays laid out as the model's (nn/parameters.h) and
// updated by one launch of kernels/ema.h on the model's main stream.
//
// Note [The EMA of the weights]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// As torchvision's reference script does, with its `i` the batch's index within the epoch (0-based),
// after the optimizer step of every batch b with b % steps == 0, and with E epochs of warm-up:
//
//   adjust = world_size * batch_size * steps / epochs
//   alpha  = min(1, (1 - model_ema_decay) * adjust);  decay = 1 - alpha      (model_ema_decay)
//   update():  n_averaged == 0 ? average = model : average = decay * average + (1 - decay) * model;
//              n_averaged += 1                                               (AveragedModel.update_parameters)
//   restart(): n_averaged = 0, after the update of a batch in an epoch < E   (so the warm-up copies)
//
// The parameters and the running means and variances are averaged in fp32 (kernels/ema.h). Batch
// norm's num_batches_tracked, an integer buffer, is averaged as PyTorch does it: in fp32, then
// truncated to an integer when copied back. n_averaged counts updates, on the host, since the host
// decides when they happen; the update waits for nothing and allocates nothing.
#pragma once

#include <cstdint>

#include "nn/device_buffer.h"
#include "nn/tensor.h"

namespace cutrain {

class ResNet18;

// torchvision's decay of the average, from --model-ema-decay and the run's shape, as above.
double model_ema_decay(int world_size, int batch_size, int steps, int epochs, double model_ema_decay);

class ModelEma {
 public:
  // An average of `model` with this decay that starts as a copy of its values (AveragedModel's deep
  // copy), with n_averaged 0, so that the first update copies again. Synchronises the device.
  ModelEma(ResNet18& model, double decay);
  ModelEma(const ModelEma&) = delete;
  ModelEma& operator=(const ModelEma&) = delete;

  void update();
  void restart() { n_averaged_ = 0; }
  // The average becomes a copy of the model as it is now, with n_averaged 0, as at construction: for a
  // run resumed from a checkpoint without an average. Synchronises the device.
  void start_over();

  double decay() const { return decay_; }
  int64_t n_averaged() const { return n_averaged_; }
  int64_t num_batches_tracked() const { return num_batches_tracked_; }
  Tensor values() const;         // [params.numel()] fp32, as ParameterSet::values()
  Tensor buffer_values() const;  // as ParameterSet::buffer_values()
  // A loaded checkpoint's counters (nn/checkpoint.h load_ema writes the values).
  void set_counters(int64_t n_averaged, int64_t num_batches_tracked);

  // Exchanges the model's parameters and buffers with the average's, and refreshes the copies of the
  // weights that forward reads: called twice, it puts everything back, bit for bit. What evaluating
  // the average does (app/trainer.cpp), on the main stream, outside steps.
  void swap_with_model();

 private:
  ResNet18& model_;
  double decay_;
  int64_t n_averaged_ = 0;
  int64_t num_batches_tracked_ = 0;
  DeviceBuffer values_, buffer_values_;
  DeviceBuffer scratch_;  // the GPU's exchange goes through it; none on the CPU
};

}  // namespace cutrain
