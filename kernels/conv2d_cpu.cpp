// conv2d_cpu.cpp: the CPU reference convolution of conv2d_cpu.h, by im2col and Eigen's GEMM,
// on the threads of kernels/cpu_threads.h.
//
// Note [Convolution tiles]
// The batch is cut into tiles of whole images, and each tile is one GEMM on one thread, its
// im2col matrix in that thread's scratch (a thread_local vector that only grows, so steady-state
// calls allocate nothing). A tile holds enough images for kMinTileRows output pixels, because
// each GEMM packs the whole filter once and a tall tile spreads that cost; beyond that it holds as
// many as keep its im2col matrix within kTileFloats, so that the matrix is still in the core's
// cache when the GEMM reads it. The tiles depend on the shape alone (Note [Fixed work split]).
// The filter gradient sums over tiles: the tiles are dealt, in order, to at most kFilterGroups
// groups, each group sums its tiles in order into its own partial gradient, and the partials
// are added in group order. A 1x1, stride-1, unpadded convolution needs no im2col: x already is
// the matrix cols[N*H*W, C].
#include "kernels/conv2d_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/eigen_cpu.h"

namespace cutrain {

namespace {

constexpr int64_t kTileFloats = int64_t(1) << 18;  // 1 MiB of im2col rows per GEMM
constexpr int64_t kMinTileRows = 256;
constexpr int kFilterGroups = 16;

bool is_pointwise(const ConvShape& s) { return s.R == 1 && s.S == 1 && s.stride == 1 && s.pad == 0; }

int64_t pixels_per_image(const ConvShape& s) { return int64_t(s.P()) * s.Q(); }
int64_t window_size(const ConvShape& s) { return int64_t(s.R) * s.S * s.C; }

// How many images go into one tile (Note [Convolution tiles]).
int images_per_tile(const ConvShape& s) {
  const int64_t pixels = pixels_per_image(s);
  const int64_t for_rows = (kMinTileRows + pixels - 1) / pixels;
  const int64_t for_cache = kTileFloats / (pixels * window_size(s));
  return int(std::clamp<int64_t>(std::max(for_rows, for_cache), 1, s.N));
}

// Tile t's images: [first, first + count).
struct Tile {
  int first, count;
};

// The tiles of the batch, one per piece of parallel_for: f(Tile).
template <typename F>
void for_each_tile(const ConvShape& sh, F&& f) {
  const int per_tile = images_per_tile(sh);
  const int tiles = (sh.N + per_tile - 1) / per_tile;
  parallel_for(tiles, [&](int64_t t) {
    const int first = int(t) * per_tile;
    f(Tile{first, std::min(per_tile, sh.N - first)});
  });
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

// y[rows, K] = cols[rows, RSC] * w[K, RSC]^T, tile by tile.
void conv2d_forward_cpu(const float* x, const float* w, const ConvShape& sh, float* y) {
  const int64_t pixels = pixels_per_image(sh), window = window_size(sh);
  const ConstMatrixView weights(w, sh.K, window);
  for_each_tile(sh, [&](Tile t) {
    const ConstMatrixView cols(cols_of(x, sh, t.first, t.count), t.count * pixels, window);
    MatrixView out(y + t.first * pixels * sh.K, t.count * pixels, sh.K);
    out.noalias() = cols * weights.transpose();
  });
}

// dx = beta*dx + col2im(dy * w), tile by tile (a tile's images are its own part of dx);
// pointwise: dx = beta*dx + dy * w directly.
void conv2d_backward_data_cpu(const float* dy, const float* w, const ConvShape& sh, float beta, float* dx) {
  const int64_t pixels = pixels_per_image(sh), window = window_size(sh), image = int64_t(sh.H) * sh.W * sh.C;
  const ConstMatrixView weights(w, sh.K, window);
  for_each_tile(sh, [&](Tile t) {
    float* dx_tile = dx + t.first * image;
    scale_by_beta(dx_tile, t.count * image, beta);
    const ConstMatrixView grad_out(dy + t.first * pixels * sh.K, t.count * pixels, sh.K);
    if (is_pointwise(sh)) {
      MatrixView(dx_tile, t.count * pixels, sh.C).noalias() += grad_out * weights;
    } else {
      MatrixView dcols(scratch(t.count * pixels * window), t.count * pixels, window);
      dcols.noalias() = grad_out * weights;
      col2im_add(dcols.data(), sh, t.first, t.count, dx);
    }
  });
}

// dw[K, RSC] = beta*dw + the sum over tiles of dy[rows, K]^T * cols[rows, RSC], in the groups of
// Note [Convolution tiles]: group 0 adds into dw itself, the others into partials added after.
void conv2d_backward_filter_cpu(const float* x, const float* dy, const ConvShape& sh, float beta, float* dw) {
  const int64_t pixels = pixels_per_image(sh), window = window_size(sh), filter = sh.K * window;
  const int per_tile = images_per_tile(sh);
  const int tiles = (sh.N + per_tile - 1) / per_tile;
  const int groups = std::min(tiles, kFilterGroups);
  // Group g sums tiles [g*tiles/groups, (g+1)*tiles/groups).
  thread_local std::vector<float> partial_buffer;  // the calling thread's, lent to the workers
  if (partial_buffer.size() < size_t((groups - 1) * filter)) partial_buffer.resize(size_t((groups - 1) * filter));
  float* const partials = partial_buffer.data();
  scale_by_beta(dw, filter, beta);
  parallel_for(groups, [&](int64_t g) {
    MatrixView grad_w(g == 0 ? dw : partials + (g - 1) * filter, sh.K, window);
    if (g > 0) grad_w.setZero();
    for (int64_t t = g * tiles / groups; t < (g + 1) * tiles / groups; ++t) {
      const int first = int(t) * per_tile, count = std::min(per_tile, sh.N - first);
      const ConstMatrixView grad_out(dy + first * pixels * sh.K, count * pixels, sh.K);
      const ConstMatrixView cols(cols_of(x, sh, first, count), count * pixels, window);
      grad_w.noalias() += grad_out.transpose() * cols;
    }
  });
  // dw += partial 1, partial 2, ... in that order for every element, in slices of the filter.
  constexpr int64_t kSlice = 4096;
  parallel_for((filter + kSlice - 1) / kSlice, [&](int64_t slice) {
    const int64_t begin = slice * kSlice, end = std::min(filter, begin + kSlice);
    for (int g = 1; g < groups; ++g) {
      const float* partial = partials + (g - 1) * filter;
      for (int64_t i = begin; i < end; ++i) dw[i] += partial[i];
    }
  });
}

}  // namespace cutrain
