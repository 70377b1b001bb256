// sgd.h: the optimizer, PyTorch's torch.optim.SGD (dampening 0; weight decay, momentum,
// Nesterov) as ONE kernel over the flat parameter, gradient and momentum buffers
// (kernels/sgd.h has the math). In bf16 mode the same pass refreshes the bf16 weight copy.
//
// The learning rate lives in pinned host memory: set_lr() writes it, and step() enqueues its
// copy to the device before the update, so a step captured in a CUDA graph uses the schedule's
// current value on every replay.
#pragma once

#include "kernels/sgd.h"
#include "nn/parameters.h"

namespace cutrain {

class Context;

class SGD {
 public:
  SGD(Context& ctx, ParameterSet& params, SgdConfig config);
  ~SGD();
  SGD(const SGD&) = delete;
  SGD& operator=(const SGD&) = delete;

  void set_lr(float lr) { *lr_host_ = lr; }
  float lr() const { return *lr_host_; }
  void step();  // params -= lr * update(grads); enqueued on the stream

  const SgdConfig& config() const { return config_; }
  // Momentum buffers, laid out like the parameters (checkpointing); zero until the first step.
  Tensor momentum() const;

 private:
  Context& ctx_;
  ParameterSet& params_;
  SgdConfig config_;
  DeviceBuffer momentum_;
  float* lr_host_ = nullptr;  // pinned on the GPU path
  DeviceBuffer lr_device_;
};

}  // namespace cutrain
