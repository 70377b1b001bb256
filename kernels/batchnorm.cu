// batchnorm.cu: the CUDA side of batchnorm.h, with the element math of batchnorm.cuh.
//
// x[M, C] is NHWC memory, so a row is one pixel's C channels, contiguous. Every kernel over x
// uses one thread layout (RowsLayout): threadIdx.x and blockIdx.x pick a pack of VEC channels that
// stays the thread's for its whole life, so per-channel constants are loaded once into registers;
// threadIdx.y and blockIdx.y pick rows, striding over M. Neighbouring threads read neighbouring
// packs of a row, then the next rows: contiguous memory. Packs are 16 bytes when C and the
// addresses allow (4 floats, 8 bf16), single elements otherwise.
//   channel_sums_kernel   per-channel fp32 sums over rows (stage 1 of the forward and backward),
//                         its per-row work given by an Op (SumsOp, BackwardSumsOp);
//   bn_apply_kernel, bn_backward_apply_kernel: elementwise;
// plus one thread per channel for the statistics (stage 2).
#include "kernels/batchnorm.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/batchnorm.cuh"
#include "kernels/check.h"
#include "kernels/launch.cuh"
#include "kernels/numeric.cuh"

namespace cutrain {

namespace {

// ---- the thread layout over x[M, C] ----------------------------------------------------------

// 256-thread blocks: as many threads across a row as it has packs (up to 256), the rest down the
// rows; enough blocks down the rows that each thread visits about kRowsPerThread rows.
struct RowsLayout {
  dim3 grid, block;
  RowsLayout(int64_t M, int C, int vec) {
    constexpr int kRowsPerThread = 8;
    const int packs = C / vec;
    block = dim3(std::min(packs, kBlockThreads), kBlockThreads / std::min(packs, kBlockThreads));
    const int64_t rows_per_block = int64_t(block.y) * kRowsPerThread;
    grid = dim3((packs + block.x - 1) / block.x,
                unsigned(std::clamp<int64_t>((M + rows_per_block - 1) / rows_per_block, 1, 65535)));
  }
};

// This thread's first channel, first row and row stride under RowsLayout.
template <int VEC>
__device__ int thread_channel() {
  return (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
}
__device__ int64_t thread_first_row() { return int64_t(blockIdx.y) * blockDim.y + threadIdx.y; }
__device__ int64_t row_stride() { return int64_t(gridDim.y) * blockDim.y; }

// values[v] = per_channel[c0 + v]: a thread's channel constants, into registers.
template <int VEC>
__device__ void load_channels(const float* per_channel, int c0, float (&values)[VEC]) {
  for (int v = 0; v < VEC; ++v) values[v] = per_channel[c0 + v];
}

// ---- stage 1: per-channel sums -----------------------------------------------------------

// out_a[c] = sum_m a(m, c),  out_b[c] = sum_m b(m, c), where op.accumulate adds row m's a and b
// for the VEC channels from c0.
//
// Each thread sums its rows in fp32 registers; the block adds up its rows through shared memory,
// and one thread per channel adds the block's share to the output with atomicAdd (zeroed by the
// launcher). The order of those atomic additions varies, so the last bits of a sum can differ
// from run to run.
template <int VEC, typename Op>
__global__ void channel_sums_kernel(Op op, int64_t M, int C, float* out_a, float* out_b) {
  CUTRAIN_DYNAMIC_SHARED(float, partial);  // a then b, each [blockDim.y][width]
  const int width = blockDim.x * VEC;
  const int c0 = thread_channel<VEC>();
  float a[VEC] = {}, b[VEC] = {};
  if (c0 < C) {
    const typename Op::Channels channels = op.channels(c0);
    for (int64_t m = thread_first_row(); m < M; m += row_stride()) op.accumulate(channels, m, c0, a, b);
  }
  float* partial_a = partial;
  float* partial_b = partial + blockDim.y * width;
  for (int v = 0; v < VEC; ++v) {
    partial_a[threadIdx.y * width + threadIdx.x * VEC + v] = a[v];
    partial_b[threadIdx.y * width + threadIdx.x * VEC + v] = b[v];
  }
  __syncthreads();
  for (int j = threadIdx.y * blockDim.x + threadIdx.x; j < width; j += blockDim.x * blockDim.y) {
    const int c = blockIdx.x * width + j;
    if (c >= C) break;
    float sum_a = 0.0f, sum_b = 0.0f;
    for (int y = 0; y < int(blockDim.y); ++y) {
      sum_a += partial_a[y * width + j];
      sum_b += partial_b[y * width + j];
    }
    atomicAdd(&out_a[c], sum_a);
    atomicAdd(&out_b[c], sum_b);
  }
}

// Forward sums: a = x, b = x^2.
template <typename T, int VEC>
struct SumsOp {
  const T* x;
  int C;

  struct Channels {};
  __device__ Channels channels(int) const { return {}; }
  __device__ void accumulate(Channels, int64_t m, int c0, float* a, float* b) const {
    const Pack<T, VEC> xs = load_pack<VEC>(x + m * C + c0);
    for (int v = 0; v < VEC; ++v) {
      const float value = to_float(xs.v[v]);
      a[v] += value;
      b[v] += value * value;
    }
  }
};

// What both backward kernels read of row element i onwards: the packs of x, and
// dz = dy * act'(z) (y is read only for the ReLU's mask).
template <int VEC>
struct BackwardInputs {
  float x[VEC], dz[VEC];
};

template <typename T, int VEC>
__device__ BackwardInputs<VEC> load_backward_inputs(const T* x, const T* y, const T* dy, int64_t i,
                                                       BatchNormFusion fusion) {
  const Pack<T, VEC> xs = load_pack<VEC>(x + i), dys = load_pack<VEC>(dy + i);
  Pack<T, VEC> ys{};
  if (fusion.relu) ys = load_pack<VEC>(y + i);
  BackwardInputs<VEC> in;
  for (int v = 0; v < VEC; ++v) {
    in.x[v] = to_float(xs.v[v]);
    in.dz[v] = bn_dz(to_float(dys.v[v]), to_float(ys.v[v]), fusion);
  }
  return in;
}

// Backward sums: a = dz, b = dz*xhat; dz goes to d_residual when the residual was fused.
template <typename T, int VEC>
struct BackwardSumsOp {
  const T* x;
  const T* y;
  const T* dy;
  const float* mean;
  const float* invstd;
  BatchNormFusion fusion;
  T* d_residual;
  int C;

  struct Channels {
    float mean[VEC], invstd[VEC];
  };
  __device__ Channels channels(int c0) const {
    Channels ch;
    load_channels(mean, c0, ch.mean);
    load_channels(invstd, c0, ch.invstd);
    return ch;
  }
  __device__ void accumulate(const Channels& ch, int64_t m, int c0, float* a, float* b) const {
    const int64_t i = m * C + c0;
    const BackwardInputs<VEC> in = load_backward_inputs<T, VEC>(x, y, dy, i, fusion);
    Pack<T, VEC> dzs;
    for (int v = 0; v < VEC; ++v) {
      a[v] += in.dz[v];
      b[v] += in.dz[v] * bn_xhat(in.x[v], ch.mean[v], ch.invstd[v]);
      dzs.v[v] = from_float<T>(in.dz[v]);
    }
    if (fusion.residual) store_pack<VEC>(d_residual + i, dzs);
  }
};

// Zeroes the outputs, then launches channel_sums_kernel.
template <int VEC, typename Op>
void launch_channel_sums(const Op& op, int64_t M, int C, float* out_a, float* out_b, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(out_a, 0, sizeof(float) * C, stream));
  CUDA_CHECK(cudaMemsetAsync(out_b, 0, sizeof(float) * C, stream));
  const RowsLayout layout(M, C, VEC);
  const size_t shared_bytes = 2 * sizeof(float) * layout.block.y * layout.block.x * VEC;
  launch_kernel("channel_sums_kernel", channel_sums_kernel<VEC, Op>, layout.grid, layout.block, shared_bytes, stream,
                op, M, C, out_a, out_b);
}

// ---- stage 2: per-channel statistics -------------------------------------------------------

// mean, invstd from the sums; running statistics updated as PyTorch does (bn_finalize_channel).
__global__ void bn_finalize_stats_kernel(const float* s1, const float* s2, int C, double count, float eps,
                                         float momentum, float* mean, float* invstd, float* running_mean,
                                         float* running_var) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C)
    bn_finalize_channel(s1[c], s2[c], count, eps, momentum, &mean[c], &invstd[c], &running_mean[c], &running_var[c]);
}

// mean = running_mean, invstd = 1/sqrt(running_var + eps)
__global__ void bn_eval_stats_kernel(const float* running_mean, const float* running_var, int C, float eps,
                                     float* mean, float* invstd) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) bn_eval_channel(running_mean[c], running_var[c], eps, &mean[c], &invstd[c]);
}

// ---- stage 3 and the backward apply: elementwise -------------------------------------------

// y = act(scale*x + shift [+ residual]),  scale = gamma*invstd,  shift = beta - mean*scale
template <typename T, int VEC>
__global__ void bn_apply_kernel(const T* x, const T* residual, int64_t M, int C, const float* mean,
                                const float* invstd, const float* gamma, const float* beta, BatchNormFusion fusion,
                                T* y) {
  const int c0 = thread_channel<VEC>();
  if (c0 >= C) return;
  float scale[VEC], shift[VEC];
  for (int v = 0; v < VEC; ++v) {
    scale[v] = bn_scale(gamma[c0 + v], invstd[c0 + v]);
    shift[v] = bn_shift(beta[c0 + v], mean[c0 + v], scale[v]);
  }
  for (int64_t m = thread_first_row(); m < M; m += row_stride()) {
    const int64_t i = m * C + c0;
    const Pack<T, VEC> xs = load_pack<VEC>(x + i);
    Pack<T, VEC> rs{}, out;
    if (fusion.residual) rs = load_pack<VEC>(residual + i);
    for (int v = 0; v < VEC; ++v)
      out.v[v] = from_float<T>(bn_forward(to_float(xs.v[v]), to_float(rs.v[v]), scale[v], shift[v], fusion));
    store_pack<VEC>(y + i, out);
  }
}

// dx = gamma*invstd*(dz - t1/count - xhat*t2/count)
template <typename T, int VEC>
__global__ void bn_backward_apply_kernel(const T* x, const T* y, const T* dy, int64_t M, int C, const float* mean,
                                         const float* invstd, const float* gamma, const float* t1, const float* t2,
                                         float inv_count, BatchNormFusion fusion, T* dx) {
  const int c0 = thread_channel<VEC>();
  if (c0 >= C) return;
  float ch_mean[VEC], ch_invstd[VEC], ch_gamma[VEC], ch_t1[VEC], ch_t2[VEC];
  load_channels(mean, c0, ch_mean);
  load_channels(invstd, c0, ch_invstd);
  load_channels(gamma, c0, ch_gamma);
  load_channels(t1, c0, ch_t1);
  load_channels(t2, c0, ch_t2);
  for (int64_t m = thread_first_row(); m < M; m += row_stride()) {
    const int64_t i = m * C + c0;
    const BackwardInputs<VEC> in = load_backward_inputs<T, VEC>(x, y, dy, i, fusion);
    Pack<T, VEC> out;
    for (int v = 0; v < VEC; ++v) {
      const float xhat = bn_xhat(in.x[v], ch_mean[v], ch_invstd[v]);
      out.v[v] =
          from_float<T>(bn_backward_dx(in.dz[v], xhat, ch_gamma[v], ch_invstd[v], ch_t1[v], ch_t2[v], inv_count));
    }
    store_pack<VEC>(dx + i, out);
  }
}

}  // namespace

template <typename T>
void bn_channel_sums_cuda(const T* x, int64_t M, int C, float* s1, float* s2, cudaStream_t stream) {
  with_pack_width<T>(widest_packs_fit<T>(C, {x}), [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    launch_channel_sums<VEC>(SumsOp<T, VEC>{x, C}, M, C, s1, s2, stream);
  });
}

void bn_finalize_stats_cuda(const float* s1, const float* s2, int C, double count, float eps, float momentum,
                            float* mean, float* invstd, float* running_mean, float* running_var,
                            cudaStream_t stream) {
  launch_kernel("bn_finalize_stats_kernel", bn_finalize_stats_kernel, grid_for(C), kBlockThreads, 0, stream, s1, s2, C,
                count, eps, momentum, mean, invstd, running_mean, running_var);
}

void bn_eval_stats_cuda(const float* running_mean, const float* running_var, int C, float eps, float* mean,
                        float* invstd, cudaStream_t stream) {
  launch_kernel("bn_eval_stats_kernel", bn_eval_stats_kernel, grid_for(C), kBlockThreads, 0, stream, running_mean,
                running_var, C, eps, mean, invstd);
}

template <typename T>
void bn_apply_cuda(const T* x, const T* residual, int64_t M, int C, const float* mean, const float* invstd,
                   const float* gamma, const float* beta, BatchNormFusion fusion, T* y, cudaStream_t stream) {
  const bool fits = widest_packs_fit<T>(C, {x, y, fusion.residual ? residual : nullptr});
  with_pack_width<T>(fits, [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const RowsLayout layout(M, C, VEC);
    launch_kernel("bn_apply_kernel", bn_apply_kernel<T, VEC>, layout.grid, layout.block, 0, stream, x, residual, M, C,
                  mean, invstd, gamma, beta, fusion, y);
  });
}

template <typename T>
void bn_backward_sums_cuda(const T* x, const T* y, const T* dy, int64_t M, int C, const float* mean,
                           const float* invstd, BatchNormFusion fusion, float* t1, float* t2, T* d_residual,
                           cudaStream_t stream) {
  const bool fits = widest_packs_fit<T>(
      C, {x, dy, fusion.relu ? y : nullptr, fusion.residual ? d_residual : nullptr});
  with_pack_width<T>(fits, [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    launch_channel_sums<VEC>(BackwardSumsOp<T, VEC>{x, y, dy, mean, invstd, fusion, d_residual, C}, M, C, t1, t2,
                             stream);
  });
}

template <typename T>
void bn_backward_apply_cuda(const T* x, const T* y, const T* dy, int64_t M, int C, const float* mean,
                            const float* invstd, const float* gamma, const float* t1, const float* t2, double count,
                            BatchNormFusion fusion, T* dx, cudaStream_t stream) {
  const bool fits = widest_packs_fit<T>(C, {x, dy, dx, fusion.relu ? y : nullptr});
  with_pack_width<T>(fits, [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const RowsLayout layout(M, C, VEC);
    launch_kernel("bn_backward_apply_kernel", bn_backward_apply_kernel<T, VEC>, layout.grid, layout.block, 0, stream, x,
                  y, dy, M, C, mean, invstd, gamma, t1, t2, float(1.0 / count), fusion, dx);
  });
}

#define CUTRAIN_INSTANTIATE_BATCHNORM(T)                                                                         \
  template void bn_channel_sums_cuda<T>(const T*, int64_t, int, float*, float*, cudaStream_t);                   \
  template void bn_apply_cuda<T>(const T*, const T*, int64_t, int, const float*, const float*, const float*,     \
                                 const float*, BatchNormFusion, T*, cudaStream_t);                               \
  template void bn_backward_sums_cuda<T>(const T*, const T*, const T*, int64_t, int, const float*, const float*, \
                                         BatchNormFusion, float*, float*, T*, cudaStream_t);                     \
  template void bn_backward_apply_cuda<T>(const T*, const T*, const T*, int64_t, int, const float*,              \
                                          const float*, const float*, const float*, const float*, double,        \
                                          BatchNormFusion, T*, cudaStream_t);
CUTRAIN_INSTANTIATE_BATCHNORM(float)
CUTRAIN_INSTANTIATE_BATCHNORM(__nv_bfloat16)

}  // namespace cutrain
