// cudnn_convolution.h: the emulated cuDNN's legacy convolution as its tests call it (test_cudnn.cpp
// and test_cudnn_graph.cpp): a handle on its own stream with the four descriptors of one convolution,
// each pass's call, and CUTRAIN_EMU_CUDNN_FAIL set for one scope.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdlib>
#include <type_traits>

#include "kernels/base/check.h"
#include "kernels/conv2d_cpu.h"

namespace cutrain::test {

template <typename T>
constexpr cudnnDataType_t cudnn_type() {
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
}

enum class Pass { forward, backward_data, backward_filter };

// A handle on its own stream and the four descriptors of one convolution.
struct Convolution {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Convolution(const ConvShape& s, cudnnDataType_t type, cudnnTensorFormat_t format = CUDNN_TENSOR_NHWC) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDNN_CHECK(cudnnCreate(&handle));
    CUDNN_CHECK(cudnnSetStream(handle, stream));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, format, type, s.N, s.C, s.H, s.W));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, format, type, s.N, s.K, s.P(), s.Q()));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, format, s.K, s.C, s.R, s.S));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, s.pad, s.pad, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
  }
  ~Convolution() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroy(handle);
    cudaStreamDestroy(stream);
  }
  Convolution(const Convolution&) = delete;
  Convolution& operator=(const Convolution&) = delete;

  size_t workspace(Pass pass, int algo) const {
    size_t bytes = 0;
    if (pass == Pass::forward)
      CUDNN_CHECK(
          cudnnGetConvolutionForwardWorkspaceSize(handle, x, w, conv, y, cudnnConvolutionFwdAlgo_t(algo), &bytes));
    if (pass == Pass::backward_data)
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w, y, conv, x,
                                                               cudnnConvolutionBwdDataAlgo_t(algo), &bytes));
    if (pass == Pass::backward_filter)
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x, y, conv, w,
                                                                 cudnnConvolutionBwdFilterAlgo_t(algo), &bytes));
    return bytes;
  }

  // One pass: reads two of x, w, dy and writes the third, `out`.
  cudnnStatus_t run(Pass pass, int algo, float alpha, const void* a, const void* b, float beta, void* out,
                    void* workspace, size_t workspace_bytes) const {
    switch (pass) {
      case Pass::forward:
        return cudnnConvolutionForward(handle, &alpha, x, a, w, b, conv, cudnnConvolutionFwdAlgo_t(algo), workspace,
                                       workspace_bytes, &beta, y, out);
      case Pass::backward_data:
        return cudnnConvolutionBackwardData(handle, &alpha, w, a, y, b, conv, cudnnConvolutionBwdDataAlgo_t(algo),
                                            workspace, workspace_bytes, &beta, x, out);
      default:
        return cudnnConvolutionBackwardFilter(handle, &alpha, x, a, y, b, conv, cudnnConvolutionBwdFilterAlgo_t(algo),
                                              workspace, workspace_bytes, &beta, w, out);
    }
  }
};

// Sets CUTRAIN_EMU_CUDNN_FAIL for one scope.
class FaultScope {
 public:
  explicit FaultScope(const char* spec) { setenv("CUTRAIN_EMU_CUDNN_FAIL", spec, 1); }
  ~FaultScope() { unsetenv("CUTRAIN_EMU_CUDNN_FAIL"); }
};

}  // namespace cutrain::test
