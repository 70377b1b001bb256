#include "nn/sgd.h"

#include <cuda_bf16.h>

#include "kernels/check.h"
#include "kernels/recording.h"
#include "nn/context.h"

namespace cutrain {

SGD::SGD(Context& ctx, ParameterSet& params, SgdConfig config)
    : ctx_(ctx),
      params_(params),
      config_(config),
      momentum_(ctx.device(), params.numel() * sizeof(float)),
      lr_device_(ctx.device(), ctx.on_gpu() ? sizeof(float) : 0) {
  if (ctx.on_gpu() && !ctx.plans()) {
    CUDA_CHECK(cudaMallocHost(&lr_host_, sizeof(float)));
  } else {
    lr_host_ = new float;
  }
  *lr_host_ = 0.0f;
}

SGD::~SGD() {
  if (ctx_.on_gpu() && !ctx_.plans()) {
    cudaFreeHost(lr_host_);
  } else {
    delete lr_host_;
  }
}

Tensor SGD::momentum() const { return Tensor(momentum_.data(), DType::f32, ctx_.device(), {params_.numel()}); }

// On the GPU the copy reads the pinned value when the stream reaches it, not when step() is
// called: a learning rate set while earlier steps are still queued would reach them too. So a
// caller that changes the rate first waits for the step before (app/trainer.cpp does).
void SGD::step() {
  float* param = params_.values().as<float>();
  const float* grad = params_.grads().as<float>();
  float* buf = static_cast<float*>(momentum_.data());
  if (!ctx_.on_gpu()) {
    sgd_step_cpu(param, grad, buf, params_.numel(), lr_host_, config_);
    return;
  }
  auto* lr = static_cast<float*>(lr_device_.data());
  memcpy_async(lr, lr_host_, sizeof(float), cudaMemcpyHostToDevice, ctx_.stream);
  sgd_step_cuda(param, grad, buf, params_.values_bf16().as<__nv_bfloat16>(), params_.numel(), lr, config_,
                ctx_.stream);
}

}  // namespace cutrain
