// pooling.cuh: the element math of both poolings, shared by the CPU reference (pooling.cpp) and the
// CUDA kernels (pooling.cu). Each function computes one output element from NHWC memory, so the
// CPU loops over elements and the GPU runs one thread per element with the same code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/numeric.cuh"
#include "kernels/pooling.h"

namespace cutrain {

// Index into x of the maximum of output (n,i,j,c)'s 3x3 window at rows 2i-1.., columns 2j-1..:
// the first one in row-major window order that attains it (PyTorch's rule; a NaN wins).
template <typename T>
__host__ __device__ inline int64_t maxpool3x3s2_argmax(const T* x, int n, int i, int j, int c, int H, int W, int C) {
  int64_t best = -1;
  float best_value = 0.0f;
  for (int h = 2 * i - 1; h <= 2 * i + 1; ++h) {
    for (int w = 2 * j - 1; w <= 2 * j + 1; ++w) {
      if (h < 0 || h >= H || w < 0 || w >= W) continue;
      const int64_t index = ((int64_t(n) * H + h) * W + w) * C + c;
      const float value = to_float(x[index]);
      if (best < 0 || value > best_value || value != value) {
        best = index;
        best_value = value;
      }
    }
  }
  return best;
}

// dx[n,h,w,c] = sum of dy over the (at most 2x2) windows that contain (h,w) and whose maximum
// is there. Output row i covers input rows 2i-1..2i+1, so row h lies in rows i = h/2 .. (h+1)/2.
template <typename T>
__host__ __device__ inline float maxpool3x3s2_input_grad(const T* x, const T* dy, int n, int h, int w, int c, int H,
                                                         int W, int C) {
  const int Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  const int64_t self = ((int64_t(n) * H + h) * W + w) * C + c;
  float grad = 0.0f;
  for (int i = h / 2; i <= (h + 1) / 2 && i < Ho; ++i) {
    for (int j = w / 2; j <= (w + 1) / 2 && j < Wo; ++j) {
      if (maxpool3x3s2_argmax(x, n, i, j, c, H, W, C) == self)
        grad += to_float(dy[((int64_t(n) * Ho + i) * Wo + j) * C + c]);
    }
  }
  return grad;
}

// y[n,c] = (1/(H*W)) * sum_{h,w} x[n,h,w,c], summed in fp32 in memory order.
template <typename T>
__host__ __device__ inline float global_avgpool_channel(const T* x, int n, int c, int HW, int C) {
  const T* image = x + int64_t(n) * HW * C;
  float sum = 0.0f;
  for (int p = 0; p < HW; ++p) sum += to_float(image[int64_t(p) * C + c]);
  return sum / float(HW);
}

// dx[n,h,w,c] = dy[n,c] / (H*W)
template <typename T>
__host__ __device__ inline float global_avgpool_input_grad(const T* dy, int n, int c, int HW, int C) {
  return to_float(dy[int64_t(n) * C + c]) / float(HW);
}

}  // namespace cutrain
