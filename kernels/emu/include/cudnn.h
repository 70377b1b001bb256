// The emulation's <cudnn.h> (kernels/emu). There is no cuDNN without a GPU: only the status type
// and its string, so that kernels/check.h's CUDNN_CHECK compiles.
#pragma once

typedef enum { CUDNN_STATUS_SUCCESS = 0 } cudnnStatus_t;

inline const char* cudnnGetErrorString(cudnnStatus_t) { return "CUDNN_STATUS_SUCCESS"; }
