// cast.cu: the CUDA side of cast.h, one grid-stride pass.
#include "kernels/cast.h"

#include "kernels/launch.cuh"
#include "kernels/numeric.cuh"

namespace cutrain {

namespace {

// out[i] = bf16(in[i]), rounded to nearest even.
__global__ void cast_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  CUTRAIN_GRID_STRIDE_LOOP(i, n) { out[i] = from_float<__nv_bfloat16>(in[i]); }
}

}  // namespace

void cast_f32_to_bf16_cuda(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  launch_kernel({"cast_kernel", {bytes_of<float>(n), bytes_of<__nv_bfloat16>(n)}}, cast_kernel, grid_for(n),
                kBlockThreads, 0, stream, in, out, n);
}

}  // namespace cutrain
