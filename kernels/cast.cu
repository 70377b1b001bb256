// cast.cu: the CUDA side of cast.h, one grid-stride pass each way.
#include "kernels/cast.h"

#include "kernels/launch.cuh"
#include "kernels/numeric.cuh"

namespace cutrain {

namespace {

// out[i] = convert(in[i]), round to nearest even into bf16, exact back to fp32.
template <typename In, typename Out>
__global__ void cast_kernel(const In* in, Out* out, int64_t n) {
  CUTRAIN_GRID_STRIDE_LOOP(i, n) { out[i] = from_float<Out>(to_float(in[i])); }
}

}  // namespace

void cast_f32_to_bf16_cuda(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  launch_kernel("cast_kernel", cast_kernel<float, __nv_bfloat16>, grid_for(n), kBlockThreads, 0, stream, in, out, n);
}

void cast_bf16_to_f32_cuda(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream) {
  launch_kernel("cast_kernel", cast_kernel<__nv_bfloat16, float>, grid_for(n), kBlockThreads, 0, stream, in, out, n);
}

}  // namespace cutrain
