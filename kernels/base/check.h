// check.h: one error-check macro per NVIDIA library, all reporting through check_failed().
//
//   CUDA_CHECK(cudaMalloc(&p, n));
//   CUDNN_CHECK(cudnnBackendExecute(handle, plan, variant_pack));
//   CUBLAS_CHECK(cublasGemmEx(...));
//   NCCL_CHECK(ncclAllReduce(...));          // dist/ddp/nccl_check.h, since only dist/ links NCCL
//
// A failed call throws cutrain::CheckError (a CudnnError for cuDNN) whose message names the call,
// the file and line, and the library's own error string, e.g.
//   "cudaMalloc(&p, n) failed at nn/device_buffer.cpp:19: out of memory (cudaErrorMemoryAllocation)"
// Programs catch it in main() and print that one line; nothing is swallowed.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace cutrain {

struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failed cuDNN call keeps its status too, so that a caller can tell the library's refusal of a
// configuration (bench-step's rows, say) from other failures.
struct CudnnError : CheckError {
  CudnnError(const std::string& message, cudnnStatus_t status) : CheckError(message), status(status) {}
  cudnnStatus_t status;
};

[[noreturn]] void check_failed(const char* call, const char* file, int line, const std::string& why);
[[noreturn]] void check_failed(const char* call, const char* file, int line, cudnnStatus_t status);

}  // namespace cutrain

#define CUTRAIN_CHECK_IMPL(call, ok, why_expr)                                       \
  do {                                                                               \
    auto cutrain_status_ = (call);                                                   \
    if (cutrain_status_ != (ok)) {                                                   \
      ::cutrain::check_failed(#call, __FILE__, __LINE__, why_expr(cutrain_status_)); \
    }                                                                                \
  } while (0)

#define CUTRAIN_CUDA_WHY(s) (std::string(cudaGetErrorString(s)) + " (" + cudaGetErrorName(s) + ")")
#define CUDA_CHECK(call) CUTRAIN_CHECK_IMPL(call, cudaSuccess, CUTRAIN_CUDA_WHY)
#define CUTRAIN_CUDNN_WHY(s) (s)  // the status itself: check_failed throws a CudnnError
#define CUDNN_CHECK(call) CUTRAIN_CHECK_IMPL(call, CUDNN_STATUS_SUCCESS, CUTRAIN_CUDNN_WHY)
#define CUBLAS_CHECK(call) CUTRAIN_CHECK_IMPL(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
// Kernel launches are checked by launch_kernel (kernels/launch.cuh).
