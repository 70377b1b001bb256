// sgd.cu: the CUDA side of sgd.h, one grid-stride pass of the shared update of sgd.cuh over the
// flat parameter buffer.
#include "kernels/sgd.h"

#include "kernels/launch.cuh"
#include "kernels/sgd.cuh"

namespace cutrain {

namespace {

// g = grad + wd*param; buf = momentum*buf + g; param -= lr*(nesterov ? g + momentum*buf : buf);
// param_bf16 = bf16(param) when the forward pass reads a bf16 copy.
__global__ void sgd_step_kernel(float* param, const float* grad, float* momentum_buf, __nv_bfloat16* param_bf16,
                                int64_t n, const float* lr, SgdConfig cfg) {
  const float rate = *lr;
  CUTRAIN_GRID_STRIDE_LOOP(i, n) {
    float p = param[i], buf = momentum_buf[i];
    sgd_update(p, grad[i], buf, rate, cfg);
    param[i] = p;
    momentum_buf[i] = buf;
    if (param_bf16) param_bf16[i] = __float2bfloat16(p);
  }
}

}  // namespace

void sgd_step_cuda(float* param, const float* grad, float* momentum_buf, __nv_bfloat16* param_bf16, int64_t n,
                   const float* lr, SgdConfig cfg, cudaStream_t stream) {
  launch_kernel("sgd_step_kernel", sgd_step_kernel, grid_for(n), kBlockThreads, 0, stream, param, grad, momentum_buf,
                param_bf16, n, lr, cfg);
}

}  // namespace cutrain
