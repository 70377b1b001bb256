// The emulation's <library_types.h> (emu/): the data types and library properties that
// cuBLAS and cuDNN share, with the toolkit's values (CUDA 13). Only the entries cutrain names.
#pragma once

typedef enum cudaDataType_t {
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
} cudaDataType;
typedef enum cudaDataType_t cudaDataType_t;

typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
typedef enum libraryPropertyType_t libraryPropertyType_t;
