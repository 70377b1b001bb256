// copy_rows.cuh: one element of copy_rows.h, shared by the CPU twin and the kernel.
#pragma once

#include <cuda_runtime.h>

#include "kernels/copy_rows.h"
#include "kernels/numeric.cuh"

namespace cutrain {

// Element i = r * cols + c of the block: out[r * out_pitch + c] = Out(in[r * in_pitch + c])
template <typename In, typename Out>
__host__ __device__ inline void copy_rows_element(const RowsCopy& b, int64_t i) {
  const int64_t r = i / b.cols, c = i % b.cols;
  static_cast<Out*>(b.out)[r * b.out_pitch + c] =
      from_float<Out>(to_float(static_cast<const In*>(b.in)[r * b.in_pitch + c]));
}

}  // namespace cutrain
