// sgd.cuh: one element's SGD update, shared by the CPU reference (sgd.cpp) and the CUDA kernel
// (sgd.cu). The order of operations is PyTorch's (torch.optim.SGD, dampening 0), each product
// and sum rounded on its own, so that the kernel gives the twin's bits (Note [Rounding that
// contraction cannot change]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/numeric.cuh"
#include "kernels/sgd.h"

namespace cutrain {

// The weight decay of segment s's parameter (sgd.h).
__host__ __device__ inline float sgd_weight_decay(const SgdSegment& s, const SgdConfig& cfg) {
  return s.norm && cfg.norm_weight_decay >= 0 ? cfg.norm_weight_decay : cfg.weight_decay;
}

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

// Element i of segment s: read its gradient, update param and momentum, write the copy.
__host__ __device__ inline void sgd_update_element(float* param, float* momentum, const SgdSegment& s, int64_t i,
                                                   float lr, const SgdConfig& cfg) {
  float p = param[s.offset + i], buf = momentum[s.offset + i];
  sgd_update(p, sgd_load(s.grad, i), buf, lr, sgd_weight_decay(s, cfg), cfg);
  param[s.offset + i] = p;
  momentum[s.offset + i] = buf;
  if (s.copy.data) sgd_store(s.copy, i, p);
}

}  // namespace cutrain
