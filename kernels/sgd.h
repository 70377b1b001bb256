// sgd.h: PyTorch's SGD (dampening 0) as one pass over the flat parameter buffer:
//
//   g   = grad + weight_decay * param
//   buf = momentum * buf + g                       (buf starts at zero, which equals PyTorch's
//                                                   "buf = g" on the first step)
//   d   = nesterov ? g + momentum * buf : buf
//   param -= lr * d
//
// The learning rate is read from memory (*lr), so a captured CUDA graph replays with the
// schedule's current value. In bf16 mode the CUDA kernel also writes param_bf16, the copy the
// forward pass reads; pass nullptr otherwise. Decay masks are not applied: PyTorch's recipe
// decays every parameter, BN's included.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace cutrain {

struct SgdConfig {
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
  bool nesterov = true;
};

void sgd_step_cpu(float* param, const float* grad, float* momentum_buf, int64_t n, const float* lr, SgdConfig cfg);
void sgd_step_cuda(float* param, const float* grad, float* momentum_buf, __nv_bfloat16* param_bf16, int64_t n,
                   const float* lr, SgdConfig cfg, cudaStream_t stream);

}  // namespace cutrain
