// ema.cuh: one element of ema.h's average, shared by the CPU twin (ema.cpp) and the CUDA kernel (ema.cu).
#pragma once

#include <cuda_runtime.h>

namespace cutrain {

//   average = decay * average + rest * value, each product and the sum rounded on its own. nvcc would
// fuse a product and the sum into one fused multiply-add, rounded once; __fmul_rn and __fadd_rn are
// never fused. The host builds ema.cpp without fused multiply-adds (kernels/CMakeLists.txt).
__host__ __device__ inline float ema_average(float average, float value, float decay, float rest) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(decay, average), __fmul_rn(rest, value));
#else
  const float kept = decay * average, taken = rest * value;
  return kept + taken;
#endif
}

}  // namespace cutrain
