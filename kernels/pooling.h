// pooling.h: the two poolings of ResNet-18, on NHWC activations.
//
// Max pool, 3x3 window, stride 2, padding 1 (the imagenet stem), x[N,H,W,C] -> y[N,Ho,Wo,C] with
// Ho = (H + 2 - 3)/2 + 1:  y[n,i,j,c] = max over the in-bounds window at (2i-1, 2j-1) of x.
//   Backward routes dy to the first position that attains the maximum (PyTorch's rule); dx is
//   overwritten (=), with zeros where nothing is routed.
// Global average pool, x[N,H,W,C] -> y[N,C]: y[n,c] = mean over h,w of x[n,h,w,c].
//   Backward: dx[n,h,w,c] = dy[n,c] / (H*W).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

__host__ __device__ inline int maxpool_out_size(int in) { return (in + 2 * 1 - 3) / 2 + 1; }

void maxpool3x3s2_forward_cpu(const float* x, int N, int H, int W, int C, float* y);
void maxpool3x3s2_backward_cpu(const float* x, const float* dy, int N, int H, int W, int C, float* dx);
void global_avgpool_forward_cpu(const float* x, int N, int H, int W, int C, float* y);
void global_avgpool_backward_cpu(const float* dy, int N, int H, int W, int C, float* dx);

template <typename T>
void maxpool3x3s2_forward_cuda(const T* x, int N, int H, int W, int C, T* y, cudaStream_t stream);
template <typename T>
void maxpool3x3s2_backward_cuda(const T* x, const T* dy, int N, int H, int W, int C, T* dx, cudaStream_t stream);
// The pooled features feed the classifier in T, and their gradient comes back in T (cuBLAS
// accumulates in fp32 and writes T).
template <typename T>
void global_avgpool_forward_cuda(const T* x, int N, int H, int W, int C, T* y, cudaStream_t stream);
template <typename T>
void global_avgpool_backward_cuda(const T* dy, int N, int H, int W, int C, T* dx, cudaStream_t stream);

}  // namespace cutrain
