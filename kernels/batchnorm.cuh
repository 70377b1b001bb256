// batchnorm.cuh: the per-channel and per-element math of batch norm, shared by the CPU reference
// (batchnorm.cpp) and the CUDA kernels (batchnorm.cu), so the two compute the same formulas.
// The notation is batchnorm.h's: z the pre-activation, xhat the normalised input.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/batchnorm.h"

namespace cutrain {

// Stage 2, one channel: biased variance for normalising (clamped at zero against rounding),
// the unbiased one for the running estimate, updated as PyTorch does:
//   running = (1 - momentum) * running + momentum * batch_statistic.      (count > 1)
__host__ __device__ inline void bn_finalize_channel(float s1, float s2, double count, float eps, float momentum,
                                                    float* mean, float* invstd, float* running_mean,
                                                    float* running_var) {
  const double m = s1 / count;
  const double var = fmax(s2 / count - m * m, 0.0);
  const float unbiased_var = float(var * count / (count - 1));
  *mean = float(m);
  *invstd = float(1.0 / sqrt(var + double(eps)));
  *running_mean = momentum * float(m) + (1.0f - momentum) * *running_mean;
  *running_var = momentum * unbiased_var + (1.0f - momentum) * *running_var;
}

// Eval mode, one channel: normalise with the running statistics.
__host__ __device__ inline void bn_eval_channel(float running_mean, float running_var, float eps, float* mean,
                                                float* invstd) {
  *mean = running_mean;
  *invstd = float(1.0 / sqrt(double(running_var) + double(eps)));
}

// gamma*(x - mean)*invstd + beta  =  scale*x + shift, with these two per-channel constants.
__host__ __device__ inline float bn_scale(float gamma, float invstd) { return gamma * invstd; }
__host__ __device__ inline float bn_shift(float beta, float mean, float scale) { return beta - mean * scale; }

// Forward, one element: y = act(scale*x + shift [+ residual]).
__host__ __device__ inline float bn_forward(float x, float residual, float scale, float shift,
                                            BatchNormFusion fusion) {
  float z = scale * x + shift;
  if (fusion.residual) z += residual;
  return fusion.relu ? fmaxf(z, 0.0f) : z;
}

// dz = dy * act'(z); ReLU's derivative is [y > 0] (y = relu(z) > 0 exactly when z > 0).
__host__ __device__ inline float bn_dz(float dy, float y, BatchNormFusion fusion) {
  return (fusion.relu && !(y > 0.0f)) ? 0.0f : dy;
}

__host__ __device__ inline float bn_xhat(float x, float mean, float invstd) { return (x - mean) * invstd; }

// Backward, one element: dx = gamma*invstd*(dz - t1/count - xhat*t2/count).
__host__ __device__ inline float bn_backward_dx(float dz, float xhat, float gamma, float invstd, float t1, float t2,
                                                float inv_count) {
  return gamma * invstd * (dz - t1 * inv_count - xhat * t2 * inv_count);
}

}  // namespace cutrain
