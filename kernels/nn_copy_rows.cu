#include "kernels/nn_copy_rows.h"

#include <cuda_bf16.h>

#include "kernels/check.h"

namespace cutrain {

namespace {

template <typename Out>
__device__ Out convert(float v);
template <>
__device__ float convert<float>(float v) { return v; }
template <>
__device__ __nv_bfloat16 convert<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// One thread per element of the block.
template <typename In, typename Out>
__global__ void copy_rows_kernel(const In* in, int64_t in_pitch, Out* out, int64_t out_pitch, int64_t rows,
                                 int64_t cols) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  int64_t r = i / cols, c = i % cols;
  out[r * out_pitch + c] = convert<Out>(float(in[r * in_pitch + c]));
}

}  // namespace

template <typename In, typename Out>
void copy_rows_cuda(const In* in, int64_t in_pitch, Out* out, int64_t out_pitch, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  int64_t n = rows * cols;
  if (n == 0) return;
  constexpr int kThreads = 256;
  copy_rows_kernel<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(in, in_pitch, out, out_pitch,
                                                                                       rows, cols);
  CUDA_CHECK_LAUNCH();
}

template void copy_rows_cuda<float, float>(const float*, int64_t, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void copy_rows_cuda<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*, int64_t, __nv_bfloat16*, int64_t,
                                                            int64_t, int64_t, cudaStream_t);
template void copy_rows_cuda<__nv_bfloat16, float>(const __nv_bfloat16*, int64_t, float*, int64_t, int64_t, int64_t,
                                                    cudaStream_t);

}  // namespace cutrain
