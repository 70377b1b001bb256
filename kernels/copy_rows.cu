// copy_rows.cu: the CUDA side of copy_rows.h, one grid-stride pass over the block, converting
// through float with numeric.cuh.
#include "kernels/copy_rows.h"

#include <cuda_bf16.h>

#include "kernels/launch.cuh"
#include "kernels/numeric.cuh"

namespace cutrain {

namespace {

// out[r * out_pitch + c] = Out(in[r * in_pitch + c]), element i = r * cols + c of the block.
template <typename In, typename Out>
__global__ void copy_rows_kernel(const In* in, int64_t in_pitch, Out* out, int64_t out_pitch, int64_t rows,
                                 int64_t cols) {
  CUTRAIN_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    out[r * out_pitch + c] = from_float<Out>(to_float(in[r * in_pitch + c]));
  }
}

}  // namespace

template <typename In, typename Out>
void copy_rows_cuda(const In* in, int64_t in_pitch, Out* out, int64_t out_pitch, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  launch_kernel("copy_rows_kernel", copy_rows_kernel<In, Out>, grid_for(n), kBlockThreads, 0, stream, in, in_pitch,
                out, out_pitch, rows, cols);
}

template void copy_rows_cuda<float, float>(const float*, int64_t, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void copy_rows_cuda<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*, int64_t, __nv_bfloat16*, int64_t,
                                                            int64_t, int64_t, cudaStream_t);
template void copy_rows_cuda<__nv_bfloat16, float>(const __nv_bfloat16*, int64_t, float*, int64_t, int64_t, int64_t,
                                                    cudaStream_t);

}  // namespace cutrain
