// batchnorm.h: batch normalisation over NHWC activations, viewed as a matrix x[M, C] with
// M = N*H*W rows and one column per channel. Fusions: y = act(BN(x) [+ residual]), act = ReLU
// or identity, so one kernel family serves BN, BN+ReLU and BN+add+ReLU.
//
// Training forward, in three stages so SyncBatchNorm can all-reduce between them:
//   1. bn_channel_sums:   s1[c] = sum_m x[m,c],  s2[c] = sum_m x[m,c]^2                (fp32)
//      (SyncBN: all-reduce s1, s2 and the count across ranks here)
//   2. bn_finalize_stats: mean = s1/count, var = s2/count - mean^2 (biased, for normalising),
//                         invstd = 1/sqrt(var + eps); as PyTorch, with the unbiased variance:
//                         running_mean = (1 - momentum)*running_mean + momentum*mean,
//                         running_var  = (1 - momentum)*running_var + momentum*var*count/(count-1)
//   3. bn_apply:          y = act(gamma*(x - mean)*invstd + beta [+ residual])
// Eval forward: bn_eval_stats turns the running statistics into mean/invstd, then bn_apply.
//
// Backward, with z the pre-activation (dz = dy * [y > 0] for ReLU, dz = dy otherwise) and
// xhat = (x - mean)*invstd:
//   1. bn_backward_sums:  t1[c] = sum_m dz,  t2[c] = sum_m dz*xhat; writes dz to d_residual
//                         when the residual was fused (the residual's gradient is dz itself).
//      dbeta = t1, dgamma = t2 (this rank's share: DDP all-reduces parameter gradients later)
//      (SyncBN: all-reduce t1, t2 here)
//   2. bn_backward_apply: dx = gamma*invstd*(dz - t1/count - xhat*t2/count)
//
// Sums and statistics are fp32 arrays of C; x, y, residual and gradients are activations of type
// T (float, or __nv_bfloat16 on the GPU). The _cpu functions are the fp32 reference (sums in
// double). Pointers a fusion does not use may be nullptr: residual and d_residual without the
// residual, y in the backward without the ReLU. count (the rows over all ranks) must exceed 1.
// On the GPU, stage 1 adds each block's fp32 partial sums with atomics, so the last bits of
// s1, s2, t1, t2 may differ from run to run; all launchers are asynchronous and capturable.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

struct BatchNormFusion {
  bool relu = false;          // y = relu(...)
  bool residual = false;      // ... + residual before the activation
};

// ---- CPU reference (fp32) -----------------------------------------------------------------
void bn_channel_sums_cpu(const float* x, int64_t M, int C, float* s1, float* s2);
void bn_finalize_stats_cpu(const float* s1, const float* s2, int C, double count, float eps, float momentum,
                           float* mean, float* invstd, float* running_mean, float* running_var);
void bn_eval_stats_cpu(const float* running_mean, const float* running_var, int C, float eps,
                       float* mean, float* invstd);
void bn_apply_cpu(const float* x, const float* residual, int64_t M, int C, const float* mean,
                  const float* invstd, const float* gamma, const float* beta, BatchNormFusion fusion, float* y);
void bn_backward_sums_cpu(const float* x, const float* y, const float* dy, int64_t M, int C,
                          const float* mean, const float* invstd, BatchNormFusion fusion,
                          float* t1, float* t2, float* d_residual);
void bn_backward_apply_cpu(const float* x, const float* y, const float* dy, int64_t M, int C,
                           const float* mean, const float* invstd, const float* gamma, const float* t1,
                           const float* t2, double count, BatchNormFusion fusion, float* dx);

// ---- CUDA (T = float or __nv_bfloat16; statistics always fp32) ----------------------------
template <typename T>
void bn_channel_sums_cuda(const T* x, int64_t M, int C, float* s1, float* s2, cudaStream_t stream);
void bn_finalize_stats_cuda(const float* s1, const float* s2, int C, double count, float eps, float momentum,
                            float* mean, float* invstd, float* running_mean, float* running_var,
                            cudaStream_t stream);
void bn_eval_stats_cuda(const float* running_mean, const float* running_var, int C, float eps,
                        float* mean, float* invstd, cudaStream_t stream);
template <typename T>
void bn_apply_cuda(const T* x, const T* residual, int64_t M, int C, const float* mean, const float* invstd,
                   const float* gamma, const float* beta, BatchNormFusion fusion, T* y, cudaStream_t stream);
template <typename T>
void bn_backward_sums_cuda(const T* x, const T* y, const T* dy, int64_t M, int C, const float* mean,
                           const float* invstd, BatchNormFusion fusion, float* t1, float* t2, T* d_residual,
                           cudaStream_t stream);
template <typename T>
void bn_backward_apply_cuda(const T* x, const T* y, const T* dy, int64_t M, int C, const float* mean,
                            const float* invstd, const float* gamma, const float* t1, const float* t2,
                            double count, BatchNormFusion fusion, T* dx, cudaStream_t stream);

}  // namespace cutrain
