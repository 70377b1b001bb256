// numeric.cuh: the two element types of activations, float and __nv_bfloat16, read and written
// through float. Every piece of shared element math computes in fp32 and converts only at the
// edges, with these two functions, on the host as on the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace cutrain {

__host__ __device__ inline float to_float(float v) { return v; }
__host__ __device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__host__ __device__ inline T from_float(float v);
template <>
__host__ __device__ inline float from_float<float>(float v) {
  return v;
}
template <>  // round to nearest even
__host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

}  // namespace cutrain
