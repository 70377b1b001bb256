// batchnorm.cpp: the CPU reference of batchnorm.h. Rows m of x[M, C] in order, channels inside;
// statistics in double (the mean, then the squared deviations about it), so this is the accurate
// side of every parity test. The sums run over blocks of channels, each channel's over every row
// in order, and the element-wise passes over blocks of rows, on the threads of cpu_threads.h: the
// result is the same whatever their number (Note [Fixed work split]).
#include "kernels/batchnorm.h"

#include <algorithm>
#include <vector>

#include "kernels/batchnorm.cuh"
#include "kernels/cpu_threads.h"

namespace cutrain {

int64_t bn_mask_bytes(const BatchNormShape& shape) { return shape.rows * ((shape.channels + 7) / 8); }

namespace {

constexpr int kChannelBlock = 16;   // one 64-byte cache line of a row's fp32 channels
constexpr int64_t kRowBlock = 256;

// f(c_begin, c_end) for blocks of kChannelBlock channels, in parallel.
template <typename F>
void for_channel_blocks(int C, F&& f) {
  parallel_for((C + kChannelBlock - 1) / kChannelBlock, [&](int64_t block) {
    const int begin = int(block) * kChannelBlock;
    f(begin, std::min(C, begin + kChannelBlock));
  });
}

// f(m_begin, m_end) for blocks of kRowBlock rows, in parallel.
template <typename F>
void for_row_blocks(int64_t M, F&& f) {
  parallel_for((M + kRowBlock - 1) / kRowBlock, [&](int64_t block) {
    const int64_t begin = block * kRowBlock;
    f(begin, std::min(M, begin + kRowBlock));
  });
}

// mean[c] and m2[c] = sum_m (x[m,c] - mean[c])^2 of every channel, in double.
void channel_statistics(const float* x, int64_t M, int C, std::vector<double>& mean, std::vector<double>& m2) {
  mean.assign(C, 0.0);
  m2.assign(C, 0.0);
  for_channel_blocks(C, [&](int begin, int end) {
    for (int64_t m = 0; m < M; ++m)
      for (int c = begin; c < end; ++c) mean[c] += x[m * C + c];
    for (int c = begin; c < end; ++c) mean[c] /= double(M);
    for (int64_t m = 0; m < M; ++m)
      for (int c = begin; c < end; ++c) {
        const double d = x[m * C + c] - mean[c];
        m2[c] += d * d;
      }
  });
}

// y = act(z) and, under the ReLU fusion when f.relu_mask is given, the mask [z > 0], with the given
// statistics.
void apply(const BatchNormShape& shape, const BatchNormForward<float>& f, const float* mean, const float* invstd) {
  const int64_t M = shape.rows;
  const int C = shape.channels;
  const int mask_row_bytes = (C + 7) / 8;
  std::vector<float> scale(C);
  for (int c = 0; c < C; ++c) scale[c] = bn_scale(f.gamma[c], invstd[c]);
  for_row_blocks(M, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      uint8_t bits = 0;
      for (int c = 0; c < C; ++c) {
        const int64_t i = m * C + c;
        const float z = bn_preactivation(f.x[i], shape.fusion.residual ? f.residual[i] : 0.0f, mean[c], scale[c],
                                         f.beta[c], shape.fusion);
        f.y[i] = bn_activation(z, shape.fusion);
        bits |= uint8_t(z > 0.0f) << (c % 8);
        if (shape.fusion.relu && f.relu_mask && (c % 8 == 7 || c == C - 1)) {
          f.relu_mask[m * mask_row_bytes + c / 8] = bits;
          bits = 0;
        }
      }
    }
  });
}

// t1 = sum dz and sum dz*(x - mean) (t2 = invstd times it) in double; d_residual = dz when the
// residual was fused.
void backward_sums(const BatchNormShape& shape, const BatchNormBackward<float>& b, std::vector<double>& t1,
                   std::vector<double>& t2) {
  const int64_t M = shape.rows;
  const int C = shape.channels;
  t1.assign(C, 0.0);
  t2.assign(C, 0.0);
  for_channel_blocks(C, [&](int begin, int end) {
    for (int64_t m = 0; m < M; ++m) {
      const uint8_t* mask_row = shape.fusion.relu ? b.relu_mask + m * ((C + 7) / 8) : nullptr;
      for (int c = begin; c < end; ++c) {
        const int64_t i = m * C + c;
        const float dz = bn_dz(b.dy[i], mask_row && bn_mask_bit(mask_row, c), shape.fusion);
        t1[c] += dz;
        t2[c] += double(dz) * (b.x[i] - b.mean[c]);
        if (shape.fusion.residual) b.d_residual[i] = dz;
      }
    }
  });
}

}  // namespace

void bn_forward_train_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f) {
  std::vector<double> mean, m2;
  channel_statistics(f.x, shape.rows, shape.channels, mean, m2);
  for (int c = 0; c < shape.channels; ++c)
    bn_finalize_channel(double(shape.rows), mean[c], m2[c], f.eps, f.momentum, &f.mean[c], &f.invstd[c],
                        &f.running_mean[c], &f.running_var[c]);
  apply(shape, f, f.mean, f.invstd);
}

void bn_forward_eval_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f) {
  std::vector<float> invstd(shape.channels);
  for (int c = 0; c < shape.channels; ++c) invstd[c] = bn_eval_invstd(f.running_var[c], f.eps);
  apply(shape, f, f.running_mean, invstd.data());
}

void bn_rank_statistics_cpu(const BatchNormShape& shape, const float* x, const BatchNormRankStats& s) {
  std::vector<double> mean, m2;
  channel_statistics(x, shape.rows, shape.channels, mean, m2);
  for (int c = 0; c < shape.channels; ++c) {
    s.local_mean[c] = float(mean[c]);
    s.local_m2[c] = float(m2[c]);
    s.sum[c] = float(double(shape.rows) * mean[c]);
  }
}

void bn_rank_m2_cpu(const BatchNormShape& shape, const BatchNormRankStats& s, double count) {
  for (int c = 0; c < shape.channels; ++c)
    s.m2[c] = bn_rank_m2(double(shape.rows), s.local_mean[c], s.local_m2[c], s.sum[c] / count);
}

void bn_forward_apply_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f, const BatchNormRankStats& s,
                          double count) {
  for (int c = 0; c < shape.channels; ++c)
    bn_finalize_channel(count, s.sum[c] / count, s.m2[c], f.eps, f.momentum, &f.mean[c], &f.invstd[c],
                        &f.running_mean[c], &f.running_var[c]);
  apply(shape, f, f.mean, f.invstd);
}

void bn_backward_sums_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, float* sums) {
  std::vector<double> t1, t2;
  backward_sums(shape, b, t1, t2);
  for (int c = 0; c < shape.channels; ++c) {
    b.dbeta[c] = sums[c] = float(t1[c]);
    b.dgamma[c] = sums[shape.channels + c] = float(b.invstd[c] * t2[c]);
  }
}

// dx = gamma*invstd*(dz - t1/count - xhat*t2/count), in batchnorm.cuh's form
void bn_backward_apply_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, const float* sums,
                           double count) {
  const int C = shape.channels;
  std::vector<BackwardChannel> k(C);
  for (int c = 0; c < C; ++c) k[c] = bn_backward_channel(b.gamma[c], b.invstd[c], sums[c], sums[C + c], float(1.0 / count));
  for_row_blocks(shape.rows, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const uint8_t* mask_row = shape.fusion.relu ? b.relu_mask + m * ((C + 7) / 8) : nullptr;
      for (int c = 0; c < C; ++c) {
        const int64_t i = m * C + c;
        const float dz = bn_dz(b.dy[i], mask_row && bn_mask_bit(mask_row, c), shape.fusion);
        b.dx[i] = bn_backward_dx(dz, b.x[i], b.mean[c], k[c]);
      }
    }
  });
}

void bn_backward_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b) {
  std::vector<float> sums(2 * size_t(shape.channels));
  bn_backward_sums_cpu(shape, b, sums.data());
  bn_backward_apply_cpu(shape, b, sums.data(), double(shape.rows));
}

}  // namespace cutrain
