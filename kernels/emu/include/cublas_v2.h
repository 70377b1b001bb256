// The emulation's <cublas_v2.h> (kernels/emu). There is no cuBLAS without a GPU: only the status
// type and its string, so that kernels/check.h's CUBLAS_CHECK compiles.
#pragma once

typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;

inline const char* cublasGetStatusString(cublasStatus_t) { return "CUBLAS_STATUS_SUCCESS"; }
