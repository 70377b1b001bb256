// conv2d_cpu.cpp: the CPU reference convolution of conv2d_cpu.h, by im2col and Eigen's GEMM.
//
// The batch is processed in chunks of whole images whose im2col matrix fits a scratch buffer of
// about kChunkFloats (kept in a thread_local vector that only grows, so steady-state calls
// allocate nothing). A 1x1, stride-1, unpadded convolution needs no im2col: x already is the
// matrix cols[N*H*W, C].
#include "kernels/conv2d_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/eigen_cpu.h"

namespace cutrain {

namespace {

constexpr int64_t kChunkFloats = int64_t(1) << 20;  // 4 MiB of im2col rows per GEMM

bool is_pointwise(const ConvShape& s) { return s.R == 1 && s.S == 1 && s.stride == 1 && s.pad == 0; }

int64_t pixels_per_image(const ConvShape& s) { return int64_t(s.P()) * s.Q(); }
int64_t window_size(const ConvShape& s) { return int64_t(s.R) * s.S * s.C; }

// How many images go into one GEMM.
int images_per_chunk(const ConvShape& s) {
  const int64_t per_image = pixels_per_image(s) * window_size(s);
  return int(std::clamp<int64_t>(kChunkFloats / per_image, 1, s.N));
}

float* scratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (int64_t(buffer.size()) < floats) buffer.resize(floats);
  return buffer.data();
}

// Walks the im2col matrix of images [first, first + count) in memory order: for each output
// pixel (n, p, q) and window tap (r, s), visit(column, source) gets the offset of the tap's C
// values in the matrix and the offset of input pixel (n, p*stride - pad + r, q*stride - pad + s)
// in x, or -1 where the window leaves the image.
template <typename Visit>
void for_each_tap(const ConvShape& sh, int first, int count, Visit visit) {
  int64_t column = 0;
  for (int n = first; n < first + count; ++n)
    for (int p = 0; p < sh.P(); ++p)
      for (int q = 0; q < sh.Q(); ++q)
        for (int r = 0; r < sh.R; ++r)
          for (int s = 0; s < sh.S; ++s, column += sh.C) {
            const int h = p * sh.stride - sh.pad + r, w = q * sh.stride - sh.pad + s;
            const bool inside = h >= 0 && h < sh.H && w >= 0 && w < sh.W;
            visit(column, inside ? ((int64_t(n) * sh.H + h) * sh.W + w) * sh.C : int64_t(-1));
          }
}

// cols[(n*P + p)*Q + q, (r*S + s)*C + i] = x[n, p*stride - pad + r, q*stride - pad + s, i], or 0
// outside the image.
void im2col(const float* x, const ConvShape& sh, int first, int count, float* cols) {
  for_each_tap(sh, first, count, [&](int64_t column, int64_t source) {
    if (source >= 0)
      std::memcpy(cols + column, x + source, sizeof(float) * sh.C);
    else
      std::memset(cols + column, 0, sizeof(float) * sh.C);
  });
}

// The transpose of im2col: dx[n, h, w, i] += dcols[row of (n,p,q), column of (r,s,i)].
void col2im_add(const float* dcols, const ConvShape& sh, int first, int count, float* dx) {
  for_each_tap(sh, first, count, [&](int64_t column, int64_t source) {
    if (source < 0) return;
    for (int i = 0; i < sh.C; ++i) dx[source + i] += dcols[column + i];
  });
}

// The im2col matrix of images [first, first + count): x itself for a pointwise convolution.
const float* cols_of(const float* x, const ConvShape& sh, int first, int count) {
  if (is_pointwise(sh)) return x + int64_t(first) * sh.H * sh.W * sh.C;
  float* cols = scratch(count * pixels_per_image(sh) * window_size(sh));
  im2col(x, sh, first, count, cols);
  return cols;
}

}  // namespace

// y[rows, K] = cols[rows, RSC] * w[K, RSC]^T, chunk by chunk.
void conv2d_forward_cpu(const float* x, const float* w, const ConvShape& sh, float* y) {
  const int64_t pixels = pixels_per_image(sh), window = window_size(sh);
  const ConstMatrixView weights(w, sh.K, window);
  const int chunk = images_per_chunk(sh);
  for (int first = 0; first < sh.N; first += chunk) {
    const int count = std::min(chunk, sh.N - first);
    const ConstMatrixView cols(cols_of(x, sh, first, count), count * pixels, window);
    MatrixView out(y + first * pixels * sh.K, count * pixels, sh.K);
    out.noalias() = cols * weights.transpose();
  }
}

// dx = beta*dx + col2im(dy * w), chunk by chunk; pointwise: dx = beta*dx + dy * w directly.
void conv2d_backward_data_cpu(const float* dy, const float* w, const ConvShape& sh, float beta, float* dx) {
  const int64_t pixels = pixels_per_image(sh), window = window_size(sh);
  const ConstMatrixView weights(w, sh.K, window);
  scale_by_beta(dx, int64_t(sh.N) * sh.H * sh.W * sh.C, beta);
  const int chunk = images_per_chunk(sh);
  for (int first = 0; first < sh.N; first += chunk) {
    const int count = std::min(chunk, sh.N - first);
    const ConstMatrixView grad_out(dy + first * pixels * sh.K, count * pixels, sh.K);
    if (is_pointwise(sh)) {
      MatrixView(dx + first * pixels * sh.C, count * pixels, sh.C).noalias() += grad_out * weights;
    } else {
      MatrixView dcols(scratch(count * pixels * window), count * pixels, window);
      dcols.noalias() = grad_out * weights;
      col2im_add(dcols.data(), sh, first, count, dx);
    }
  }
}

// dw[K, RSC] = beta*dw + sum over chunks of dy[rows, K]^T * cols[rows, RSC].
void conv2d_backward_filter_cpu(const float* x, const float* dy, const ConvShape& sh, float beta, float* dw) {
  const int64_t pixels = pixels_per_image(sh), window = window_size(sh);
  scale_by_beta(dw, sh.K * window, beta);
  MatrixView grad_w(dw, sh.K, window);
  const int chunk = images_per_chunk(sh);
  for (int first = 0; first < sh.N; first += chunk) {
    const int count = std::min(chunk, sh.N - first);
    const ConstMatrixView grad_out(dy + first * pixels * sh.K, count * pixels, sh.K);
    const ConstMatrixView cols(cols_of(x, sh, first, count), count * pixels, window);
    grad_w.noalias() += grad_out.transpose() * cols;
  }
}

}  // namespace cutrain
