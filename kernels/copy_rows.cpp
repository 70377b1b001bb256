// copy_rows.cpp: the CPU twin of copy_rows.h.
#include "kernels/copy_rows.h"

#include <cuda_bf16.h>

#include "kernels/copy_rows.cuh"

namespace cutrain {

template <typename In, typename Out>
void copy_rows_cpu(const RowsCopy* copies, int count) {
  for (int k = 0; k < count; ++k)
    for (int64_t i = 0; i < copies[k].rows * copies[k].cols; ++i) copy_rows_element<In, Out>(copies[k], i);
}

template void copy_rows_cpu<float, float>(const RowsCopy*, int);
template void copy_rows_cpu<float, __nv_bfloat16>(const RowsCopy*, int);
template void copy_rows_cpu<__nv_bfloat16, float>(const RowsCopy*, int);

}  // namespace cutrain
