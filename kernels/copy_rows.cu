// copy_rows.cu: the CUDA side of copy_rows.h: one launch over all the blocks, every block of the
// grid working on every copy in turn with a grid-stride loop, converting through float.
#include "kernels/copy_rows.h"

#include <cuda_bf16.h>

#include "kernels/copy_rows.cuh"
#include "kernels/launch.cuh"

namespace cutrain {

namespace {

template <typename In, typename Out>
__global__ void copy_rows_kernel(const RowsCopy* copies, int count) {
  for (int k = 0; k < count; ++k) {
    const RowsCopy b = copies[k];
    CUTRAIN_GRID_STRIDE_LOOP(i, b.rows * b.cols) { copy_rows_element<In, Out>(b, i); }
  }
}

}  // namespace

template <typename In, typename Out>
void copy_rows_cuda(const RowsCopy* copies, const RowsCopy* device_copies, int count, cudaStream_t stream) {
  int64_t most = 0, elements = 0;
  for (int k = 0; k < count; ++k) {
    most = std::max(most, copies[k].rows * copies[k].cols);
    elements += copies[k].rows * copies[k].cols;
  }
  if (elements == 0) return;
  const Traffic bytes{bytes_of<In>(elements) + bytes_of<RowsCopy>(count), bytes_of<Out>(elements)};
  launch_kernel({"copy_rows_kernel", bytes}, copy_rows_kernel<In, Out>, grid_for(most), kBlockThreads, 0, stream,
                device_copies, count);
}

template void copy_rows_cuda<float, float>(const RowsCopy*, const RowsCopy*, int, cudaStream_t);
template void copy_rows_cuda<float, __nv_bfloat16>(const RowsCopy*, const RowsCopy*, int, cudaStream_t);
template void copy_rows_cuda<__nv_bfloat16, float>(const RowsCopy*, const RowsCopy*, int, cudaStream_t);

}  // namespace cutrain
