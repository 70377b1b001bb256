#include "nn/model_ema.h"

#include <algorithm>

#include "kernels/base/check.h"
#include "kernels/ema.h"
#include "nn/context.h"
#include "nn/resnet.h"

namespace cutrain {

namespace {

// PyTorch's `1 - decay`, in double, and both factors rounded to fp32 (kernels/ema.h).
struct Factors {
  float decay, rest;
};
Factors factors(double decay) { return {float(decay), float(1.0 - decay)}; }

}  // namespace

// As the reference script computes it in Python: integers multiplied exactly, one true division, then doubles.
double model_ema_decay(int world_size, int batch_size, int steps, int epochs, double model_ema_decay) {
  const double adjust = double(int64_t(world_size) * batch_size * steps) / double(epochs);
  const double alpha = std::min(1.0, (1.0 - model_ema_decay) * adjust);
  return 1.0 - alpha;
}

ModelEma::ModelEma(ResNet18& model, double decay)
    : model_(model),
      decay_(decay),
      values_(model.params().device(), model.params().values().bytes()),
      buffer_values_(model.params().device(), model.params().buffer_values().bytes()) {
  if (model.context().on_gpu())
    scratch_ = DeviceBuffer(Device::cuda, std::max(values_.bytes(), buffer_values_.bytes()));
  start_over();
}

void ModelEma::start_over() {
  n_averaged_ = 0;
  update();  // a copy
  n_averaged_ = 0;
  model_.context().synchronize();
}

Tensor ModelEma::values() const {
  return Tensor(values_.data(), DType::f32, values_.device(), {int64_t(values_.bytes() / sizeof(float))});
}

Tensor ModelEma::buffer_values() const {
  return Tensor(buffer_values_.data(), DType::f32, buffer_values_.device(),
                {int64_t(buffer_values_.bytes() / sizeof(float))});
}

void ModelEma::set_counters(int64_t n_averaged, int64_t num_batches_tracked) {
  n_averaged_ = n_averaged;
  num_batches_tracked_ = num_batches_tracked;
}

void ModelEma::update() {
  const ParameterSet& params = model_.params();
  const Factors f = factors(decay_);
  const bool copy = n_averaged_ == 0;
  const EmaArrays parameters{values().as<float>(), params.values().as<float>(), params.values().numel()};
  const EmaArrays buffers{buffer_values().as<float>(), params.buffer_values().as<float>(),
                          params.buffer_values().numel()};
  Context& ctx = model_.context();
  if (ctx.on_gpu()) {
    ema_update_cuda(parameters, buffers, f.decay, f.rest, copy, ctx.main_stream());
  } else {
    ema_update_cpu(parameters, buffers, f.decay, f.rest, copy);
  }
  // num_batches_tracked, an int64 buffer: PyTorch multiplies it as fp32 and truncates the sum to an integer.
  if (copy) {
    num_batches_tracked_ = model_.num_batches_tracked;
  } else {
    const float kept = float(num_batches_tracked_) * f.decay, taken = float(model_.num_batches_tracked) * f.rest;
    num_batches_tracked_ = int64_t(kept + taken);
  }
  ++n_averaged_;
}

void ModelEma::swap_with_model() {
  const ParameterSet& params = model_.params();
  Context& ctx = model_.context();
  const Tensor pairs[2][2] = {{values(), params.values()}, {buffer_values(), params.buffer_values()}};
  for (const auto& [mine, model] : pairs) {
    if (ctx.on_gpu()) {
      const cudaStream_t stream = ctx.main_stream();
      CUDA_CHECK(cudaMemcpyAsync(scratch_.data(), model.data, model.bytes(), cudaMemcpyDeviceToDevice, stream));
      CUDA_CHECK(cudaMemcpyAsync(model.data, mine.data, model.bytes(), cudaMemcpyDeviceToDevice, stream));
      CUDA_CHECK(cudaMemcpyAsync(mine.data, scratch_.data(), model.bytes(), cudaMemcpyDeviceToDevice, stream));
    } else {
      std::swap_ranges(mine.as<float>(), mine.as<float>() + mine.numel(), model.as<float>());
    }
  }
  model_.sync_weight_copies();
}

}  // namespace cutrain
