// step_metrics.h: each step's loss and correct count, collected without waiting on the device.
//
// On the GPU every step enqueues two 4-byte copies (loss, correct) into slots of a device ring;
// the host reads the ring only when it logs, once per --log-every steps, which is the only point
// where it waits for the device. On the CPU the values are read at once. Either way a window
// reports the mean loss, the correct count and the first step whose loss was not finite.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/device_buffer.h"

namespace cutrain {

class Context;

struct MetricsWindow {
  int steps = 0;
  double mean_loss = 0;
  int64_t correct = 0;
  int first_nonfinite = -1;  // index within the window, or -1
  float nonfinite_value = 0;
};

class StepMetrics {
 public:
  StepMetrics(Context& ctx, int capacity);

  // After a step: remember its loss and correct count (pointers into the model's memory).
  void add_step(const float* loss, const int32_t* correct);
  bool full() const { return pending_ == capacity_; }
  // Waits for the device (GPU), returns the steps added since the last flush and forgets them.
  MetricsWindow flush();

 private:
  Context& ctx_;
  int capacity_;
  int pending_ = 0;
  DeviceBuffer device_losses_, device_correct_;  // GPU ring
  std::vector<float> losses_;
  std::vector<int32_t> correct_;
};

}  // namespace cutrain
