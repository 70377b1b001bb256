// copy_rows.h: blocks of [rows, cols] elements copied between arrays with different row pitches,
// converting the element type, any number of blocks in one launch:
//
//   out[r * out_pitch + c] = Out(in[r * in_pitch + c])     for r < rows, c < cols, in every block
//
// The model uses it to move parameters between the fp32 flat buffers and the copies the GPU's
// layers use (nn/parameters.h): the bf16 weights and the stem's zero-padded filter (rows of 3
// input channels in a pitch of 8) after initialising or loading, and, with several ranks, the
// gradients cuDNN wrote in bf16 (or padded) into the fp32 buffer the all-reduce averages.
// Elements outside the blocks are left alone (the padding stays zero).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

struct RowsCopy {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t rows = 0, cols = 0, in_pitch = 0, out_pitch = 0;
};

// In, Out: float or __nv_bfloat16 (instantiated: float->float, float->bf16, bf16->float).
template <typename In, typename Out>
void copy_rows_cpu(const RowsCopy* copies, int count);
// copies: on the host, for the grid and the inventory's bytes; device_copies: the same in device
// memory, which the kernel reads.
template <typename In, typename Out>
void copy_rows_cuda(const RowsCopy* copies, const RowsCopy* device_copies, int count, cudaStream_t stream);

}  // namespace cutrain
