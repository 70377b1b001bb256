// sgd.cuh: one parameter's SGD update, shared by the CPU reference (sgd.cpp) and the CUDA kernel
// (sgd.cu). The order of operations is PyTorch's (torch.optim.SGD, dampening 0).
#pragma once

#include <cuda_runtime.h>

#include "kernels/sgd.h"

namespace cutrain {

//   g = grad + weight_decay*param;  buf = momentum*buf + g;  d = nesterov ? g + momentum*buf : buf;
//   param -= lr*d
__host__ __device__ inline void sgd_update(float& param, float grad, float& buf, float lr, const SgdConfig& cfg) {
  const float g = grad + cfg.weight_decay * param;
  buf = cfg.momentum * buf + g;
  const float d = cfg.nesterov ? g + cfg.momentum * buf : buf;
  param -= lr * d;
}

}  // namespace cutrain
