// The emulation's <library_types.h> (kernels/emu): the data types the NVIDIA libraries share,
// with the toolkit's values. The toolkit's <cuda_runtime.h> includes it, and so does this one's.
#pragma once

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
} cudaDataType_t;
