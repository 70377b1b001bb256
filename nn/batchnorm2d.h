// batchnorm2d.h: BatchNorm2d over NHWC activations (rows m = n,h,w and one column per channel),
// optionally fused with a residual add and a ReLU:
//
//   y = act(gamma * xhat + beta [+ residual]),  xhat = (x - mean) * invstd
//
// The kernels and their math are in kernels/batchnorm.h.
//
// In training, forward normalises with the batch's statistics (the biased variance) and updates
// running_mean and running_var (the unbiased variance) with momentum 0.1, as PyTorch does. In
// evaluation it uses the running statistics. The training forward keeps mean, invstd and, under
// the ReLU, a 1-bit mask of the pre-activation's sign, which is all that backward needs besides x
// and dy. Backward writes dgamma and dbeta (=) into the flat gradient buffer, dx (=) into x.grad
// and, when the residual is fused, its gradient dz (=) into residual.grad.
//
// On the GPU a training forward and a backward are one launch each, on the main stream. With
// --batchnorm split they are two (Note [Split batch norm] in kernels/batchnorm.h), and with
// --batchnorm cudnn they are cuDNN's own calls. SyncBatchNorm (resources.sync_batchnorm) takes the
// staged kernels instead and all-reduces between them.
//
// A batch norm with its ReLU and without the residual that is planned `before_fused_conv` also
// has the two forms of Note [Batch norm before a fused convolution] (kernels/batchnorm.h), on the
// GPU with cutrain's kernels: the fused unit bn-relu-conv (nn/bn_relu_conv.h) runs them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kernels/batchnorm.h"
#include "nn/cudnn_batchnorm.h"
#include "nn/model_resources.h"

namespace cutrain {

class BatchNorm2d {
 public:
  static constexpr float kEps = 1e-5f;
  static constexpr float kMomentum = 0.1f;

  BatchNorm2d(ModelResources& resources, const std::string& name, Activation& x, bool relu,
              Activation* residual = nullptr, bool before_fused_conv = false);
  ~BatchNorm2d();

  void forward(bool train);
  void backward();
  // The fused unit's forms, GPU only, on the main stream. forward_statistics is the training
  // forward's statistics (mean, invstd, running statistics) and scale and shift (fp32 [C]), with
  // neither y nor the mask written. backward_recompute is the backward with the mask recomputed
  // from x, scale and shift, and it writes y = relu(x*scale + shift), which the forward did not.
  void forward_statistics(float* scale, float* shift);
  void backward_recompute(const float* scale, const float* shift);

  Parameter& weight;  // gamma [C]
  Parameter& bias;    // beta [C]
  BufferEntry& running_mean;
  BufferEntry& running_var;
  Activation& y;

 private:
  // The launches that a GPU step can take, planned once for this GPU. The record-only emulated
  // device of `bench-step --plan` presents an H200 (Note [Record-only device] in
  // emu/runtime.h).
  struct GpuPlans {
    BatchNormPlan forward_train, forward_eval, backward;
    BatchNormPlan rank_statistics, rank_m2, forward_apply, backward_sums, backward_apply;  // SyncBatchNorm
    std::optional<BatchNormPlan> forward_statistics, backward_recompute;                   // before_fused_conv
    int64_t partial_floats() const;
  };
  // Also readies this GPU for the plans' launches (bn_prepare_launch).
  static GpuPlans plan_gpu(const BatchNormShape& shape, size_t element_bytes, BatchNormLaunch launch,
                           bool before_fused_conv);

  double count() const;
  void check_count() const;  // throws in one line unless training has more than one value per channel
  bool synced() const { return resources_.sync_batchnorm.enabled(); }
  void reduce_across_ranks(float* data, int count) const;
  template <typename T>
  BatchNormForward<T> forward_tensors() const;
  template <typename T>
  BatchNormBackward<T> backward_tensors() const;

  std::string name_;
  ModelResources& resources_;
  Activation& x_;
  Activation* residual_;
  BatchNormShape shape_;
  GpuPlans plans_;                         // GPU only
  Tensor& mean_;                           // [C] fp32, kept for backward
  Tensor& invstd_;                         // [C] fp32
  Tensor& relu_mask_;                      // u8 [bn_mask_bytes] under the ReLU, else empty
  Tensor& sync_stats_;                     // [4C] fp32, SyncBatchNorm's statistics in forward and [t1 | t2] in backward
  Tensor& partials_;                       // fp32 scratch of the GPU's merging launches, whose split plan's ticket
                                           // starts at zero with the arena
  std::unique_ptr<CudnnBatchNorm> cudnn_;  // the training forward and backward of --batchnorm cudnn
};

}  // namespace cutrain
