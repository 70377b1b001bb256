// batchnorm.cpp: the CPU reference of batchnorm.h, on x[M, C] with the channels of a row
// contiguous. Every pass walks pieces of whole rows, so that its loops over a row's channels read
// and write contiguous memory and vectorise; the threads of cpu_threads.h share out the pieces.
// The statistics take the mean first and then the squared deviations about it, so nothing
// cancels: each block of kSumRows rows adds up its rows per channel in fp32, and the blocks'
// partial sums are added in double in block order. The backward's two sums are made the same way.
// The blocks and the pieces depend on the shape alone, so the result is the same whatever the
// number of threads (Note [Fixed work split]). The element math is batchnorm.cuh's, as on the GPU.
#include "kernels/batchnorm.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/base/cpu_threads.h"
#include "kernels/batchnorm.cuh"

namespace cutrain {

namespace {

// The bytes that hold `bits` bits of the ReLU mask (kernels/batchnorm.h), such as a row's C.
int mask_bytes(int bits) { return (bits + 7) / 8; }

}  // namespace

int64_t bn_mask_bytes(const BatchNormShape& shape) { return shape.rows * mask_bytes(shape.channels); }

namespace {

// Each block of kSumRows rows adds up its values per channel in fp32, which over so few rows
// rounds far less than fp32 output does; the blocks' partial sums are then added in double.
constexpr int64_t kSumRows = 32;

// A piece of work for the threads: whole blocks of sums, about 16K elements (64 KB of fp32).
int64_t piece_rows(int C) { return kSumRows * std::max<int64_t>(1, 16384 / (kSumRows * C)); }

// f(m_begin, m_end) for the pieces of rows, in parallel.
template <typename F>
void for_row_pieces(int64_t M, int C, F&& f) {
  const int64_t rows = piece_rows(C);
  parallel_for((M + rows - 1) / rows, [&](int64_t piece) {
    const int64_t begin = piece * rows;
    f(begin, std::min(M, begin + rows));
  });
}

// f(fusion) with the fusion a compile-time constant (a std::integral_constant that converts to
// it), so that the loops over a row's channels carry no branch on it and vectorise.
template <typename F>
void with_constant_fusion(BatchNormFusion fusion, F&& f) {
  using std::integral_constant;
  if (fusion.relu && fusion.residual)
    f(integral_constant<BatchNormFusion, BatchNormFusion{true, true}>{});
  else if (fusion.relu)
    f(integral_constant<BatchNormFusion, BatchNormFusion{true, false}>{});
  else if (fusion.residual)
    f(integral_constant<BatchNormFusion, BatchNormFusion{false, true}>{});
  else
    f(integral_constant<BatchNormFusion, BatchNormFusion{false, false}>{});
}

// sums[t*C + c] over every row of `terms` per-channel quantities: add_row(m, part, scratch) adds
// row m's to part[t*C + c], the fp32 partial sums of row m's block, with `scratch` a row of C
// floats of its own to use, and the blocks' partials are then added in double in block order, so
// the result depends on the shape alone.
template <typename AddRow>
void channel_sums(int64_t M, int C, int terms, AddRow&& add_row, std::vector<double>& sums) {
  const int64_t width = int64_t(terms) * C;
  const int64_t blocks = (M + kSumRows - 1) / kSumRows;
  std::vector<float> parts(size_t(blocks * width), 0.0f);
  for_row_pieces(M, C, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(C);
    for (int64_t m = begin; m < end; ++m) add_row(m, parts.data() + m / kSumRows * width, scratch.data());
  });
  sums.assign(size_t(width), 0.0);
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t i = 0; i < width; ++i) sums[i] += parts[block * width + i];
}

// mean[c] and m2[c] = sum_m (x[m,c] - mean[c])^2 of every channel: the mean first, then the
// squared deviations about it.
void channel_statistics(const float* x, int64_t M, int C, std::vector<double>& mean, std::vector<double>& m2) {
  channel_sums(
      M, C, 1,
      [&](int64_t m, float* part, float*) {
        for (int c = 0; c < C; ++c) part[c] += x[m * C + c];
      },
      mean);
  for (double& sum : mean) sum /= double(M);
  const std::vector<float> mean_fp32(mean.begin(), mean.end());
  channel_sums(
      M, C, 1,
      [&](int64_t m, float* part, float*) {
        for (int c = 0; c < C; ++c) {
          const float d = x[m * C + c] - mean_fp32[c];
          part[c] += d * d;
        }
      },
      m2);
}

// The mask bytes of one row from its pre-activations z: bit k of a byte is [z > 0] of its k-th
// channel. A byte's 8 channels take no branch, so the compiler packs them with vector compares.
void pack_mask_row(const float* z, int C, uint8_t* mask_row) {
  const auto byte_of = [&](int first, int count) {
    uint8_t bits = 0;
    for (int k = 0; k < count; ++k) bits |= uint8_t(z[first + k] > 0.0f) << k;
    return bits;
  };
  for (int byte = 0; byte < C / 8; ++byte) mask_row[byte] = byte_of(8 * byte, 8);
  if (C % 8 != 0) mask_row[C / 8] = byte_of(C / 8 * 8, C % 8);
}

// dz = bn_dz(dy, mask bit) of one row, 32 channels at a time: their 4 mask bytes make one word,
// whose bits the compiler unpacks into vector lanes with shifts.
template <typename Fusion>
void dz_row(const float* dy_row, const uint8_t* mask_row, int C, Fusion fusion, float* dz) {
  const auto chunk = [&](int first, int count) {
    uint32_t word = 0;
    if (fusion().relu)
      for (int j = 0; j < mask_bytes(count); ++j) word |= uint32_t(mask_row[first / 8 + j]) << (8 * j);
    for (int k = 0; k < count; ++k) dz[first + k] = bn_dz(dy_row[first + k], (word >> k) & 1, fusion);
  };
  for (int first = 0; first < C / 32 * 32; first += 32) chunk(first, 32);
  if (C % 32 != 0) chunk(C / 32 * 32, C % 32);
}

// y = act(z) and, under the ReLU fusion when f.relu_mask is given, the mask [z > 0], with the given
// statistics.
void apply(const BatchNormShape& shape, const BatchNormForward<float>& f, const float* mean, const float* invstd) {
  const int64_t M = shape.rows;
  const int C = shape.channels;
  const int mask_row_bytes = mask_bytes(C);
  std::vector<float> scale(C);
  for (int c = 0; c < C; ++c) scale[c] = bn_scale(f.gamma[c], invstd[c]);
  with_constant_fusion(shape.fusion, [&](auto fusion) {
    for_row_pieces(M, C, [&](int64_t begin, int64_t end) {
      std::vector<float> z(C);
      for (int64_t m = begin; m < end; ++m) {
        for (int c = 0; c < C; ++c) {
          const int64_t i = m * C + c;
          z[c] =
              bn_preactivation(f.x[i], fusion().residual ? f.residual[i] : 0.0f, mean[c], scale[c], f.beta[c], fusion);
          f.y[i] = bn_activation(z[c], fusion);
        }
        if (fusion().relu && f.relu_mask) pack_mask_row(z.data(), C, f.relu_mask + m * mask_row_bytes);
      }
    });
  });
}

// sums = [t1 | sum dz*(x - mean)] (t2 = invstd times the second) in double; d_residual = dz when
// the residual was fused.
void backward_sums(const BatchNormShape& shape, const BatchNormBackward<float>& b, std::vector<double>& sums) {
  const int64_t M = shape.rows;
  const int C = shape.channels;
  with_constant_fusion(shape.fusion, [&](auto fusion) {
    channel_sums(
        M, C, 2,
        [&](int64_t m, float* part, float* dz) {
          dz_row(b.dy + m * C, fusion().relu ? b.relu_mask + m * mask_bytes(C) : nullptr, C, fusion, dz);
          for (int c = 0; c < C; ++c) {
            part[c] += dz[c];
            part[C + c] += dz[c] * (b.x[m * C + c] - b.mean[c]);
          }
          if (fusion().residual) std::copy(dz, dz + C, b.d_residual + m * C);
        },
        sums);
  });
}

// The training forward's statistics: mean, invstd and the running statistics.
void batch_statistics(const BatchNormShape& shape, const BatchNormForward<float>& f) {
  std::vector<double> mean, m2;
  channel_statistics(f.x, shape.rows, shape.channels, mean, m2);
  for (int c = 0; c < shape.channels; ++c)
    bn_finalize_channel(double(shape.rows), mean[c], m2[c], f.eps, f.momentum, &f.mean[c], &f.invstd[c],
                        &f.running_mean[c], &f.running_var[c]);
}

// Note [Batch norm before a fused convolution]: its two forms take a ReLU without the residual.
void check_prologue_fusion(const BatchNormShape& shape, const char* function) {
  if (!shape.fusion.relu || shape.fusion.residual)
    throw std::invalid_argument(std::string(function) + ": the fusion must be a ReLU without the residual");
}

}  // namespace

void bn_forward_train_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f) {
  batch_statistics(shape, f);
  apply(shape, f, f.mean, f.invstd);
}

void bn_forward_statistics_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f, float* scale,
                               float* shift) {
  check_prologue_fusion(shape, "bn_forward_statistics_cpu");
  batch_statistics(shape, f);
  for (int c = 0; c < shape.channels; ++c) {
    scale[c] = bn_prologue_scale(f.gamma[c], f.invstd[c]);
    shift[c] = bn_prologue_shift(f.beta[c], f.mean[c], scale[c]);
  }
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
  const int C = shape.channels;
  std::vector<double> t;
  backward_sums(shape, b, t);
  for (int c = 0; c < C; ++c) {
    b.dbeta[c] = sums[c] = float(t[c]);
    b.dgamma[c] = sums[C + c] = float(b.invstd[c] * t[C + c]);
  }
}

// dx = gamma*invstd*(dz - t1/count - xhat*t2/count), in batchnorm.cuh's form
void bn_backward_apply_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, const float* sums,
                           double count) {
  const int C = shape.channels;
  std::vector<BackwardChannel> k(C);
  for (int c = 0; c < C; ++c)
    k[c] = bn_backward_channel(b.gamma[c], b.invstd[c], sums[c], sums[C + c], float(1.0 / count));
  with_constant_fusion(shape.fusion, [&](auto fusion) {
    for_row_pieces(shape.rows, C, [&](int64_t begin, int64_t end) {
      std::vector<float> dz(C);
      for (int64_t m = begin; m < end; ++m) {
        dz_row(b.dy + m * C, fusion().relu ? b.relu_mask + m * mask_bytes(C) : nullptr, C, fusion, dz.data());
        for (int c = 0; c < C; ++c) b.dx[m * C + c] = bn_backward_dx(dz[c], b.x[m * C + c], b.mean[c], k[c]);
      }
    });
  });
}

void bn_backward_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b) {
  std::vector<float> sums(2 * size_t(shape.channels));
  bn_backward_sums_cpu(shape, b, sums.data());
  bn_backward_apply_cpu(shape, b, sums.data(), double(shape.rows));
}

// The mask [z > 0] and the activation max(z, 0) of the prologue's z, then bn_backward with that mask.
void bn_backward_recompute_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, const float* scale,
                               const float* shift, float* activation) {
  check_prologue_fusion(shape, "bn_backward_recompute_cpu");
  const int C = shape.channels;
  std::vector<uint8_t> mask(size_t(bn_mask_bytes(shape)));
  for_row_pieces(shape.rows, C, [&](int64_t begin, int64_t end) {
    std::vector<float> z(C);
    for (int64_t m = begin; m < end; ++m) {
      for (int c = 0; c < C; ++c) {
        z[c] = bn_prologue_preactivation(b.x[m * C + c], scale[c], shift[c]);
        activation[m * C + c] = bn_activation(z[c], shape.fusion);
      }
      pack_mask_row(z.data(), C, mask.data() + m * mask_bytes(C));
    }
  });
  BatchNormBackward<float> with_mask = b;
  with_mask.relu_mask = mask.data();
  bn_backward_cpu(shape, with_mask);
}

}  // namespace cutrain
