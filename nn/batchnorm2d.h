// batchnorm2d.h: BatchNorm2d over NHWC activations (rows m = n,h,w; one column per channel),
// optionally fused with a residual add and ReLU:   y = act(gamma * xhat + beta [+ residual]),
// xhat = (x - mean) * invstd. The staged kernels and their math are in kernels/batchnorm.h.
//
// Training: batch statistics (biased variance for normalising), running_mean and running_var
// (unbiased) updated with momentum 0.1 as PyTorch does; eval: running statistics.
// Backward writes dgamma, dbeta (=) into the flat gradient buffer, dx (=) into x.grad and, when
// the residual is fused, its gradient dz (=) into residual.grad.
// SyncBatchNorm (net.sync_batchnorm): the sums are all-reduced between stages, forward and backward.
#pragma once

#include <string>

#include "kernels/batchnorm.h"
#include "nn/net.h"

namespace cutrain {

class BatchNorm2d {
 public:
  static constexpr float kEps = 1e-5f;
  static constexpr float kMomentum = 0.1f;

  BatchNorm2d(Net& net, const std::string& name, Activation& x, bool relu, Activation* residual = nullptr);

  void forward(bool train);
  void backward();

  Parameter& weight;  // gamma [C]
  Parameter& bias;    // beta [C]
  BufferEntry& running_mean;
  BufferEntry& running_var;
  Activation& y;

 private:
  double count() const;
  void reduce_across_ranks(float* data, int count) const;

  std::string name_;
  Net& net_;
  Activation& x_;
  Activation* residual_;
  BatchNormFusion fusion_;
  int64_t rows_;
  int channels_;
  Tensor& sums_;     // [2C] fp32: s1|s2 in forward, dgamma|dbeta copy under SyncBN in backward
  Tensor& mean_;     // [C] fp32, kept for backward
  Tensor& invstd_;   // [C] fp32
};

}  // namespace cutrain
