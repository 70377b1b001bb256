// pooling.cu: the CUDA side of pooling.h: one thread per output element, each running the shared
// element math of pooling.cuh (the max pool's backward gathers from the windows that cover its
// input element instead of scattering, so no atomics and no zeroing pass are needed).
#include "kernels/pooling.h"

#include <cuda_bf16.h>

#include "kernels/launch.cuh"
#include "kernels/numeric.cuh"
#include "kernels/pooling.cuh"

namespace cutrain {

namespace {

// The coordinates of element `index` of an NHWC tensor [N, H, W, C].
struct NhwcIndex {
  int n, h, w, c;
  __device__ NhwcIndex(int64_t index, int H, int W, int C) {
    c = int(index % C);
    index /= C;
    w = int(index % W);
    index /= W;
    h = int(index % H);
    n = int(index / H);
  }
};

// y[n,i,j,c] = max over the window of output (i,j), the first maximum in window order
template <typename T>
__global__ void maxpool3x3s2_forward_kernel(const T* x, int N, int H, int W, int C, T* y) {
  const int Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  CUTRAIN_GRID_STRIDE_LOOP(index, int64_t(N) * Ho * Wo * C) {
    const NhwcIndex o(index, Ho, Wo, C);
    y[index] = x[maxpool3x3s2_argmax(x, o.n, o.h, o.w, o.c, H, W, C)];
  }
}

// dx[n,h,w,c] = sum of dy over the windows containing (h,w) whose maximum is there
template <typename T>
__global__ void maxpool3x3s2_backward_kernel(const T* x, const T* dy, int N, int H, int W, int C, T* dx) {
  CUTRAIN_GRID_STRIDE_LOOP(index, int64_t(N) * H * W * C) {
    const NhwcIndex in(index, H, W, C);
    dx[index] = from_float<T>(maxpool3x3s2_input_grad(x, dy, in.n, in.h, in.w, in.c, H, W, C));
  }
}

// y[n,c] = mean over h,w of x[n,h,w,c]; thread (n,c) walks its channel, neighbouring threads
// read neighbouring channels.
template <typename T>
__global__ void global_avgpool_forward_kernel(const T* x, int N, int HW, int C, T* y) {
  CUTRAIN_GRID_STRIDE_LOOP(index, int64_t(N) * C) {
    y[index] = from_float<T>(global_avgpool_channel(x, int(index / C), int(index % C), HW, C));
  }
}

// dx[n,h,w,c] = dy[n,c] / (H*W)
template <typename T>
__global__ void global_avgpool_backward_kernel(const T* dy, int N, int HW, int C, T* dx) {
  CUTRAIN_GRID_STRIDE_LOOP(index, int64_t(N) * HW * C) {
    dx[index] = from_float<T>(global_avgpool_input_grad(dy, int(index / (int64_t(HW) * C)), int(index % C), HW, C));
  }
}

}  // namespace

// Traffic: a pool's input and output once each (the max pool's overlapping windows hit the cache).

template <typename T>
void maxpool3x3s2_forward_cuda(const T* x, int N, int H, int W, int C, T* y, cudaStream_t stream) {
  const int64_t inputs = int64_t(N) * H * W * C, outputs = int64_t(N) * maxpool_out_size(H) * maxpool_out_size(W) * C;
  launch_kernel({"maxpool3x3s2_forward_kernel", {bytes_of<T>(inputs), bytes_of<T>(outputs)}},
                maxpool3x3s2_forward_kernel<T>, grid_for(outputs), kBlockThreads, 0, stream, x, N, H, W, C, y);
}

template <typename T>
void maxpool3x3s2_backward_cuda(const T* x, const T* dy, int N, int H, int W, int C, T* dx, cudaStream_t stream) {
  const int64_t inputs = int64_t(N) * H * W * C, outputs = int64_t(N) * maxpool_out_size(H) * maxpool_out_size(W) * C;
  launch_kernel({"maxpool3x3s2_backward_kernel", {bytes_of<T>(inputs + outputs), bytes_of<T>(inputs)}},
                maxpool3x3s2_backward_kernel<T>, grid_for(inputs), kBlockThreads, 0, stream, x, dy, N, H, W, C, dx);
}

template <typename T>
void global_avgpool_forward_cuda(const T* x, int N, int H, int W, int C, T* y, cudaStream_t stream) {
  const int64_t inputs = int64_t(N) * H * W * C, outputs = int64_t(N) * C;
  launch_kernel({"global_avgpool_forward_kernel", {bytes_of<T>(inputs), bytes_of<T>(outputs)}},
                global_avgpool_forward_kernel<T>, grid_for(outputs), kBlockThreads, 0, stream, x, N, H * W, C, y);
}

template <typename T>
void global_avgpool_backward_cuda(const T* dy, int N, int H, int W, int C, T* dx, cudaStream_t stream) {
  const int64_t inputs = int64_t(N) * H * W * C, outputs = int64_t(N) * C;
  launch_kernel({"global_avgpool_backward_kernel", {bytes_of<T>(outputs), bytes_of<T>(inputs)}},
                global_avgpool_backward_kernel<T>, grid_for(inputs), kBlockThreads, 0, stream, dy, N, H * W, C, dx);
}

#define CUTRAIN_INSTANTIATE_POOLING(T)                                                                   \
  template void maxpool3x3s2_forward_cuda<T>(const T*, int, int, int, int, T*, cudaStream_t);            \
  template void maxpool3x3s2_backward_cuda<T>(const T*, const T*, int, int, int, int, T*, cudaStream_t); \
  template void global_avgpool_forward_cuda<T>(const T*, int, int, int, int, T*, cudaStream_t);          \
  template void global_avgpool_backward_cuda<T>(const T*, int, int, int, int, T*, cudaStream_t);
CUTRAIN_INSTANTIATE_POOLING(float)
CUTRAIN_INSTANTIATE_POOLING(__nv_bfloat16)

}  // namespace cutrain
