// ema.cuh: one element of ema.h's average, shared by the CPU twin (ema.cpp) and the CUDA kernel (ema.cu).
#pragma once

#include <cuda_runtime.h>

#include "kernels/numeric.cuh"

namespace cutrain {

//   average = decay * average + rest * value, each product and the sum rounded on its own, as
// PyTorch's three tensor operations round them (Note [Rounding that contraction cannot change]).
__host__ __device__ inline float ema_average(float average, float value, float decay, float rest) {
  return add_rn(mul_rn(decay, average), mul_rn(rest, value));
}

}  // namespace cutrain
