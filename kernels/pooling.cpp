// pooling.cpp: the CPU reference of pooling.h, one loop over output elements calling the shared
// element math of pooling.cuh, one image per piece of parallel_for (cpu_threads.h).
#include "kernels/pooling.h"

#include "kernels/base/cpu_threads.h"
#include "kernels/pooling.cuh"

namespace cutrain {

void maxpool3x3s2_forward_cpu(const float* x, int N, int H, int W, int C, float* y) {
  const int Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  parallel_for(N, [&](int64_t n) {
    float* out = y + n * Ho * Wo * C;
    for (int i = 0; i < Ho; ++i)
      for (int j = 0; j < Wo; ++j)
        for (int c = 0; c < C; ++c) *out++ = x[maxpool3x3s2_argmax(x, int(n), i, j, c, H, W, C)];
  });
}

void maxpool3x3s2_backward_cpu(const float* x, const float* dy, int N, int H, int W, int C, float* dx) {
  parallel_for(N, [&](int64_t n) {
    float* out = dx + n * H * W * C;
    for (int h = 0; h < H; ++h)
      for (int w = 0; w < W; ++w)
        for (int c = 0; c < C; ++c) *out++ = maxpool3x3s2_input_grad(x, dy, int(n), h, w, c, H, W, C);
  });
}

void global_avgpool_forward_cpu(const float* x, int N, int H, int W, int C, float* y) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) y[int64_t(n) * C + c] = global_avgpool_channel(x, n, c, H * W, C);
}

void global_avgpool_backward_cpu(const float* dy, int N, int H, int W, int C, float* dx) {
  for (int n = 0; n < N; ++n)
    for (int p = 0; p < H * W; ++p)
      for (int c = 0; c < C; ++c) *dx++ = global_avgpool_input_grad(dy, n, c, H * W, C);
}

}  // namespace cutrain
