// batchnorm.cpp: the CPU reference of batchnorm.h. Rows m of x[M, C] in order, channels inside;
// the sums accumulate in double, so this is the accurate side of every parity test.
#include "kernels/batchnorm.h"

#include <vector>

#include "kernels/batchnorm.cuh"

namespace cutrain {

// s1[c] = sum_m x[m,c],  s2[c] = sum_m x[m,c]^2
void bn_channel_sums_cpu(const float* x, int64_t M, int C, float* s1, float* s2) {
  std::vector<double> sum(C, 0.0), sum_sq(C, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * C;
    for (int c = 0; c < C; ++c) {
      sum[c] += row[c];
      sum_sq[c] += double(row[c]) * row[c];
    }
  }
  for (int c = 0; c < C; ++c) {
    s1[c] = float(sum[c]);
    s2[c] = float(sum_sq[c]);
  }
}

void bn_finalize_stats_cpu(const float* s1, const float* s2, int C, double count, float eps, float momentum,
                           float* mean, float* invstd, float* running_mean, float* running_var) {
  for (int c = 0; c < C; ++c)
    bn_finalize_channel(s1[c], s2[c], count, eps, momentum, &mean[c], &invstd[c], &running_mean[c], &running_var[c]);
}

void bn_eval_stats_cpu(const float* running_mean, const float* running_var, int C, float eps, float* mean,
                       float* invstd) {
  for (int c = 0; c < C; ++c) bn_eval_channel(running_mean[c], running_var[c], eps, &mean[c], &invstd[c]);
}

// y = act(scale*x + shift [+ residual]), scale = gamma*invstd, shift = beta - mean*scale
void bn_apply_cpu(const float* x, const float* residual, int64_t M, int C, const float* mean, const float* invstd,
                  const float* gamma, const float* beta, BatchNormFusion fusion, float* y) {
  std::vector<float> scale(C), shift(C);
  for (int c = 0; c < C; ++c) {
    scale[c] = bn_scale(gamma[c], invstd[c]);
    shift[c] = bn_shift(beta[c], mean[c], scale[c]);
  }
  for (int64_t m = 0; m < M; ++m) {
    for (int c = 0; c < C; ++c) {
      const int64_t i = m * C + c;
      y[i] = bn_forward(x[i], fusion.residual ? residual[i] : 0.0f, scale[c], shift[c], fusion);
    }
  }
}

// t1[c] = sum_m dz,  t2[c] = sum_m dz*xhat;  d_residual = dz when the residual was fused.
void bn_backward_sums_cpu(const float* x, const float* y, const float* dy, int64_t M, int C, const float* mean,
                          const float* invstd, BatchNormFusion fusion, float* t1, float* t2, float* d_residual) {
  std::vector<double> sum_dz(C, 0.0), sum_dz_xhat(C, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    for (int c = 0; c < C; ++c) {
      const int64_t i = m * C + c;
      const float dz = bn_dz(dy[i], fusion.relu ? y[i] : 0.0f, fusion);
      sum_dz[c] += dz;
      sum_dz_xhat[c] += double(dz) * bn_xhat(x[i], mean[c], invstd[c]);
      if (fusion.residual) d_residual[i] = dz;
    }
  }
  for (int c = 0; c < C; ++c) {
    t1[c] = float(sum_dz[c]);
    t2[c] = float(sum_dz_xhat[c]);
  }
}

// dx = gamma*invstd*(dz - t1/count - xhat*t2/count)
void bn_backward_apply_cpu(const float* x, const float* y, const float* dy, int64_t M, int C, const float* mean,
                           const float* invstd, const float* gamma, const float* t1, const float* t2, double count,
                           BatchNormFusion fusion, float* dx) {
  const float inv_count = float(1.0 / count);
  for (int64_t m = 0; m < M; ++m) {
    for (int c = 0; c < C; ++c) {
      const int64_t i = m * C + c;
      const float dz = bn_dz(dy[i], fusion.relu ? y[i] : 0.0f, fusion);
      dx[i] = bn_backward_dx(dz, bn_xhat(x[i], mean[c], invstd[c]), gamma[c], invstd[c], t1[c], t2[c], inv_count);
    }
  }
}

}  // namespace cutrain
