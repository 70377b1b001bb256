// batchnorm.cuh: the per-channel and per-element math of batch norm, shared by the CPU reference
// (batchnorm.cpp) and the CUDA kernels (batchnorm.cu), so the two compute the same formulas.
// The notation is batchnorm.h's: z the pre-activation, xhat the normalised input. Every product
// that a sum takes is written out, so that its rounding is the same in every kernel and on the
// host (Note [Rounding that contraction cannot change]): unfused where the CPU twin computes the
// formula too, one fmaf where only the kernels do.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/batchnorm.h"
#include "kernels/numeric.cuh"

namespace cutrain {

// ---- statistics ---------------------------------------------------------------------------------

// Welford's running statistics of one channel: count values, their mean, and m2, the sum of their
// squared deviations from it. Adding a value or merging two sets never subtracts two large sums.
struct Welford {
  float count = 0.0f, mean = 0.0f, m2 = 0.0f;
};

// One more value x (count + 1 = new_count, 1/new_count = inv_count, shared by a thread's channels).
__host__ __device__ inline void welford_add(Welford& w, float x, float new_count, float inv_count) {
  const float delta = x - w.mean;
  w.count = new_count;
  w.mean = fmaf(delta, inv_count, w.mean);
  w.m2 = fmaf(delta, x - w.mean, w.m2);
}

// The statistics of a's values and b's together (Chan, Golub and LeVeque):
//   delta = mean_b - mean_a,  n = n_a + n_b,  mean = mean_a + delta*n_b/n,
//   m2 = m2_a + m2_b + delta^2*n_a*n_b/n.
// Not symmetric in its rounding: a fixed order of merges gives a fixed result.
__host__ __device__ inline Welford merge(const Welford& a, const Welford& b) {
  const float count = a.count + b.count;
  if (count == 0.0f) return a;
  const float share_b = b.count / count;
  const float delta = b.mean - a.mean;
  return {count, fmaf(delta, share_b, a.mean), fmaf(delta * delta * a.count, share_b, a.m2 + b.m2)};
}

// The backward's two sums of one channel, t1 = sum dz and t2 = sum dz*xhat. The kernels add up
// dz*(x - mean) and multiply by invstd once: t2 = invstd * sum dz*(x - mean).
struct Sums {
  float t1 = 0.0f, t2 = 0.0f;
};

__host__ __device__ inline Sums merge(const Sums& a, const Sums& b) { return {a.t1 + b.t1, a.t2 + b.t2}; }

// The invstd to normalise with, from a channel's m2 over `count` rows (the biased variance).
__host__ __device__ inline float bn_invstd(double count, double m2, float eps) {
  return float(1.0 / sqrt(fmax(m2, 0.0) / count + double(eps)));
}

// The running statistics, updated as PyTorch does, with the unbiased variance (count > 1):
//   running = (1 - momentum) * running + momentum * batch_statistic.
__host__ __device__ inline void bn_update_running(double count, double mean, double m2, float momentum,
                                                  float* running_mean, float* running_var) {
  const float unbiased_var = float(fmax(m2, 0.0) / (count - 1));
  *running_mean = add_rn(mul_rn(momentum, float(mean)), mul_rn(1.0f - momentum, *running_mean));
  *running_var = add_rn(mul_rn(momentum, unbiased_var), mul_rn(1.0f - momentum, *running_var));
}

// Both, for the one thread that owns the channel.
__host__ __device__ inline void bn_finalize_channel(double count, double mean, double m2, float eps, float momentum,
                                                    float* mean_out, float* invstd_out, float* running_mean,
                                                    float* running_var) {
  *mean_out = float(mean);
  *invstd_out = bn_invstd(count, m2, eps);
  bn_update_running(count, mean, m2, momentum, running_mean, running_var);
}

// SyncBatchNorm: this rank's share of m2 about the mean over all ranks,
//   local_m2 + rows*(local_mean - mean)^2,  which the ranks add up to the whole batch's m2.
__host__ __device__ inline float bn_rank_m2(double rows, float local_mean, float local_m2, double mean) {
  const double delta = double(local_mean) - mean;
  return float(add_rn(double(local_m2), mul_rn(mul_rn(rows, delta), delta)));
}

// Eval mode, one channel: invstd from the running variance.
__host__ __device__ inline float bn_eval_invstd(float running_var, float eps) {
  return float(1.0 / sqrt(double(running_var) + double(eps)));
}

// ---- elements -----------------------------------------------------------------------------------

// gamma*xhat = (x - mean)*scale with this per-channel constant.
__host__ __device__ inline float bn_scale(float gamma, float invstd) { return gamma * invstd; }

// z = (x - mean)*scale + beta [+ residual]. Subtracting the mean first keeps z exact-ish when
// |mean| >> std, where scale*x + (beta - mean*scale) would cancel.
__host__ __device__ inline float bn_preactivation(float x, float residual, float mean, float scale, float beta,
                                                  BatchNormFusion fusion) {
  const float z = add_rn(mul_rn(x - mean, scale), beta);
  return fusion.residual ? z + residual : z;
}

// ReLU as a select rather than fmaxf(z, 0): the same value for every z (NaN gives 0, -0 gives +0),
// but GCC calls fmaxf out of line for its NaN rules, which keeps the CPU's loops from vectorising.
__host__ __device__ inline float bn_activation(float z, BatchNormFusion fusion) {
  return fusion.relu ? (z > 0.0f ? z : 0.0f) : z;
}

// dz = dy * act'(z): ReLU's derivative is the mask bit [z > 0].
__host__ __device__ inline float bn_dz(float dy, bool z_positive, BatchNormFusion fusion) {
  return (fusion.relu && !z_positive) ? 0.0f : dy;
}

// The fused convolution's prologue (Note [Batch norm before a fused convolution] in batchnorm.h):
// its two constants of a channel, and its pre-activation z = x*scale + shift, each product and sum
// rounded once, so that the kernels, the CPU twin and the emulated cuDNN agree on every mask bit.
__host__ __device__ inline float bn_prologue_scale(float gamma, float invstd) { return mul_rn(gamma, invstd); }
__host__ __device__ inline float bn_prologue_shift(float beta, float mean, float scale) {
  return sub_rn(beta, mul_rn(mean, scale));
}
__host__ __device__ inline float bn_prologue_preactivation(float x, float scale, float shift) {
  return add_rn(mul_rn(x, scale), shift);
}

// Backward, one channel: dx = gamma*invstd*(dz - t1/count - xhat*t2/count), rewritten as
//   dx = scale*dz + shift + slope*(x - mean),
//   scale = gamma*invstd,  shift = -scale*t1/count,  slope = -scale*invstd*t2/count:
// three constants per channel for a thread to hold instead of five.
struct BackwardChannel {
  float scale, shift, slope;
};

__host__ __device__ inline BackwardChannel bn_backward_channel(float gamma, float invstd, float t1, float t2,
                                                               float inv_count) {
  const float scale = gamma * invstd;
  return {scale, -scale * t1 * inv_count, -scale * invstd * t2 * inv_count};
}

__host__ __device__ inline float bn_backward_dx(float dz, float x, float mean, const BackwardChannel& k) {
  return add_rn(add_rn(mul_rn(k.scale, dz), k.shift), mul_rn(k.slope, x - mean));
}

}  // namespace cutrain
