// cudnn_batchnorm.h: a training batch norm through cuDNN's own NHWC kernels, the yardstick that
// `--batchnorm cudnn` sets beside cutrain's (nn/batchnorm2d.h): cudnnBatchNormalizationForwardTrainingEx
// and cudnnBatchNormalizationBackwardEx in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, with cuDNN's
// fused ReLU (CUDNN_BATCHNORM_OPS_BN_ACTIVATION) and add+ReLU (..._BN_ADD_ACTIVATION) where cuDNN
// takes them, else cuDNN's plain batch norm and cutrain's (Note [cuDNN's batch norm types]).
//
// Note [cuDNN's batch norm types]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cuDNN 9's header (cudnn_ops.h, cudnnBatchNormalizationForwardTraining) says the statistics'
// descriptor is float whenever x is not double, so bf16 activations with fp32 gamma, beta, running
// and saved statistics is the configuration it describes, and the one asked for here: x, z, y and
// their gradients bf16 (or fp32) NHWC, the statistics float 1xCx1x1.
//
// The fused ops are another matter. cuDNN 8.9.2's API reference for
// cudnnBatchNormalizationForwardTrainingEx
// (https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-892/api/index.html#cudnnBatchNormalizationForwardTrainingEx)
// calls bnOps the "mode of operation for the fast NHWC kernel", and that kernel runs only when
// "all tensors, namely, x, y, dz, dy, dx must be NHWC-fully packed and must be of the type
// CUDNN_DATA_HALF", in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, with C a multiple of 4 for
// BN_ADD_ACTIVATION; PaddlePaddle registers its fused_bn_add_activation op for float16 alone. So
// for bf16 and fp32 the fused ops may be refused, and the emulated cuDNN refuses them.
//
// The workspace-size query, made when the model is built, tells. Where it refuses the fused ops
// with CUDNN_STATUS_NOT_SUPPORTED, the layer asks for cuDNN's plain batch norm
// (CUDNN_BATCHNORM_OPS_BN) and applies cutrain's ReLU, after the residual's add, with
// bn_activation_cuda (kernels/batchnorm.h), and its gradient with bn_activation_backward_cuda
// before cuDNN's backward; one line on stderr says so, once per run. Where cuDNN refuses plain
// batch norm too, the query fails through CUDNN_CHECK with cuDNN's own words, never inside a step.
//
// The reserve space, kept from the forward to the backward, is cuDNN's own (its ReLU mask, say); the
// backward also reads y and beta, as cuDNN asks with an activation. Like cutrain's kernels it
// writes dgamma, dbeta, dx and the residual's gradient with =, and it keeps the batch's mean and
// invstd. Eval mode and SyncBatchNorm's stages stay cutrain's kernels: cuDNN has no staged form.
#pragma once

#include <cudnn.h>

#include <cstddef>

#include "kernels/batchnorm.h"
#include "nn/model_resources.h"

namespace cutrain {

class CudnnBatchNorm {
 public:
  // Describes x [N, H, W, C] to cuDNN and plans the workspace and the reserve space. The
  // forward's momentum and eps come with its tensors (BatchNormForward).
  CudnnBatchNorm(ModelResources& resources, const Tensor& x, BatchNormFusion fusion, float eps);
  ~CudnnBatchNorm();
  CudnnBatchNorm(const CudnnBatchNorm&) = delete;
  CudnnBatchNorm& operator=(const CudnnBatchNorm&) = delete;

  template <typename T>
  void forward_train(const BatchNormForward<T>& f);
  // y: the forward's output, which cuDNN reads with an activation.
  template <typename T>
  void backward(const BatchNormBackward<T>& b, const T* y, const float* beta);

 private:
  // Whether cuDNN applies the activation (and adds the residual) itself, else cutrain's kernels do.
  bool fused() const { return ops_ != CUDNN_BATCHNORM_OPS_BN || !fusion_.relu; }
  cudnnActivationDescriptor_t activation() const { return ops_ != CUDNN_BATCHNORM_OPS_BN ? relu_ : nullptr; }
  cudnnTensorDescriptor_t z_desc() const { return ops_ == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? x_desc_ : nullptr; }

  ModelResources& resources_;
  BatchNormFusion fusion_;
  float eps_;                // the forward's, which the backward must repeat
  cudnnBatchNormOps_t ops_;  // CUDNN_BATCHNORM_OPS_BN where cuDNN refuses the fused ops
  cudnnTensorDescriptor_t x_desc_ = nullptr, stats_desc_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  Tensor* reserve_ = nullptr;  // u8, planned for the whole step
  // Not fused: cutrain's activation after cuDNN's forward, and its gradient before cuDNN's backward,
  // which without a residual takes the first dz_bytes_ of the workspace.
  BatchNormPlan activation_plan_{}, activation_backward_plan_{};
  size_t dz_bytes_ = 0;
};

}  // namespace cutrain
