#include "app/step_metrics.h"

#include <cmath>
#include <stdexcept>

#include "kernels/base/check.h"
#include "nn/context.h"

namespace cutrain {

StepMetrics::StepMetrics(Context& ctx, int capacity)
    : ctx_(ctx), capacity_(capacity), losses_(size_t(capacity)), correct_(size_t(capacity)) {
  if (ctx.on_gpu()) {
    device_losses_ = DeviceBuffer(Device::cuda, sizeof(float) * size_t(capacity));
    device_correct_ = DeviceBuffer(Device::cuda, sizeof(int32_t) * size_t(capacity));
  }
}

void StepMetrics::add_step(const float* loss, const int32_t* correct) {
  if (full()) throw std::logic_error("StepMetrics: flush() before adding more steps");
  if (ctx_.on_gpu()) {
    auto* losses = static_cast<float*>(device_losses_.data()) + pending_;
    auto* counts = static_cast<int32_t*>(device_correct_.data()) + pending_;
    CUDA_CHECK(cudaMemcpyAsync(losses, loss, sizeof(float), cudaMemcpyDeviceToDevice, ctx_.main_stream()));
    CUDA_CHECK(cudaMemcpyAsync(counts, correct, sizeof(int32_t), cudaMemcpyDeviceToDevice, ctx_.main_stream()));
  } else {
    losses_[size_t(pending_)] = *loss;
    correct_[size_t(pending_)] = *correct;
  }
  ++pending_;
}

MetricsWindow StepMetrics::flush() {
  MetricsWindow w;
  w.steps = pending_;
  if (pending_ == 0) return w;
  if (ctx_.on_gpu()) {
    CUDA_CHECK(cudaMemcpyAsync(losses_.data(), device_losses_.data(), sizeof(float) * size_t(pending_),
                               cudaMemcpyDeviceToHost, ctx_.main_stream()));
    CUDA_CHECK(cudaMemcpyAsync(correct_.data(), device_correct_.data(), sizeof(int32_t) * size_t(pending_),
                               cudaMemcpyDeviceToHost, ctx_.main_stream()));
    ctx_.synchronize();
  }
  double loss_sum = 0;
  for (int i = 0; i < pending_; ++i) {
    const float loss = losses_[size_t(i)];
    if (!std::isfinite(loss) && w.first_nonfinite < 0) {
      w.first_nonfinite = i;
      w.nonfinite_value = loss;
    }
    loss_sum += loss;
    w.correct += correct_[size_t(i)];
  }
  w.mean_loss = loss_sum / pending_;
  pending_ = 0;
  return w;
}

}  // namespace cutrain
