// copy_rows.h: copy a [rows, cols] block between arrays with different row pitches,
// converting the element type:
//
//   out[r * out_pitch + c] = Out(in[r * in_pitch + c])     for r < rows, c < cols
//
// The model uses it for the GPU stem, whose cuDNN filter has 8 input channels where the
// parameter has 3 (OHWI rows of pitch 8 vs 3), and to widen bf16 filter gradients into the fp32
// gradient buffer. Elements outside the block are left alone (the padding stays zero).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

// In/Out: float or __nv_bfloat16 (instantiated: float->float, bf16->bf16, bf16->float).
template <typename In, typename Out>
void copy_rows_cuda(const In* in, int64_t in_pitch, Out* out, int64_t out_pitch, int64_t rows, int64_t cols,
                    cudaStream_t stream);

}  // namespace cutrain
