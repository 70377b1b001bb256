// sgd.cuh: one element's SGD update, shared by the CPU reference (sgd.cpp) and the CUDA kernel
// (sgd.cu). The order of operations is PyTorch's (torch.optim.SGD, dampening 0), each product
// and sum rounded on its own, so that the kernel gives the twin's bits (Note [Rounding that
// contraction cannot change]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/numeric.cuh"
#include "kernels/sgd.h"

namespace cutrain {

// The weight decay of segment s's parameter (sgd.h).
__host__ __device__ inline float sgd_weight_decay(const SgdSegment& s, const SgdConfig& cfg) {
  return s.norm && cfg.norm_weight_decay >= 0 ? cfg.norm_weight_decay : cfg.weight_decay;
}

// torch.nn.utils.clip_grad_norm_'s factor for a total norm of sqrt(squares) (sgd.h). `factor > 1`
// rather than std::min, so that a NaN norm gives a NaN factor, as torch.clamp does.
__host__ __device__ inline float sgd_clip_factor(double squares, double max_norm) {
  const double factor = max_norm / (sqrt(squares) + 1e-6);
  return float(factor > 1 ? 1.0 : factor);
}

// The gradient as the update takes it, times the clip factor, as clip_grad_norm_ multiplies every
// gradient by its factor. A factor of 1 (no clipping, or a norm within the bound) is exact, so the
// unclipped step keeps its bits.
__host__ __device__ inline float sgd_scaled(float grad, float scale) { return mul_rn(grad, scale); }

//   g = grad + decay*param;  buf = momentum*buf + g;  d = nesterov ? g + momentum*buf : buf;
//   param -= lr*d
__host__ __device__ inline void sgd_update(float& param, float grad, float& buf, float lr, float decay,
                                           const SgdConfig& cfg) {
  const float g = add_rn(grad, mul_rn(decay, param));
  buf = add_rn(mul_rn(cfg.momentum, buf), g);
  const float d = cfg.nesterov ? add_rn(g, mul_rn(cfg.momentum, buf)) : buf;
  param = sub_rn(param, mul_rn(lr, d));
}

// Where element i of the parameter sits in the array.
__host__ __device__ inline int64_t sgd_index(const SgdArray& a, int64_t i) {
  return a.cols ? i / a.cols * a.pitch + i % a.cols : i;
}

__host__ __device__ inline float sgd_load(const SgdArray& a, int64_t i) {
  const int64_t j = sgd_index(a, i);
  return a.bf16 ? to_float(static_cast<const __nv_bfloat16*>(a.data)[j]) : static_cast<const float*>(a.data)[j];
}

__host__ __device__ inline void sgd_store(const SgdArray& a, int64_t i, float value) {
  const int64_t j = sgd_index(a, i);
  if (a.bf16) {
    static_cast<__nv_bfloat16*>(a.data)[j] = from_float<__nv_bfloat16>(value);
  } else {
    static_cast<float*>(a.data)[j] = value;
  }
}

// Element i of segment s: read its gradient and scale it, update param and momentum, write the copy.
__host__ __device__ inline void sgd_update_element(float* param, float* momentum, const SgdSegment& s, int64_t i,
                                                   float lr, float scale, const SgdConfig& cfg) {
  float p = param[s.offset + i], buf = momentum[s.offset + i];
  sgd_update(p, sgd_scaled(sgd_load(s.grad, i), scale), buf, lr, sgd_weight_decay(s, cfg), cfg);
  param[s.offset + i] = p;
  momentum[s.offset + i] = buf;
  if (s.copy.data) sgd_store(s.copy, i, p);
}

}  // namespace cutrain
