// cudnn_batchnorm.h: a training batch norm through cuDNN's own NHWC kernels, the yardstick that
// `--batchnorm cudnn` sets beside cutrain's (nn/batchnorm2d.h): cudnnBatchNormalizationForwardTrainingEx
// and cudnnBatchNormalizationBackwardEx in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, with cuDNN's
// fused ReLU (CUDNN_BATCHNORM_OPS_BN_ACTIVATION) and add+ReLU (..._BN_ADD_ACTIVATION).
//
// Note [cuDNN's batch norm types]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// cuDNN 9's header (cudnn_ops.h, cudnnBatchNormalizationForwardTraining) says the statistics'
// descriptor is float whenever x is not double, so bf16 activations with fp32 gamma, beta, running
// and saved statistics is the configuration it describes, and the one asked for here: x, z, y and
// their gradients bf16 (or fp32) NHWC, the statistics float 1xCx1x1. Whether its persistent NHWC
// kernels take bf16 with the fused ops (its documentation names half for them) only a GPU can
// tell: the workspace and reserve-space queries are made when the model is built, so a refusal
// fails there, through CUDNN_CHECK with cuDNN's own words, never inside a step.
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
  ModelResources& resources_;
  BatchNormFusion fusion_;
  float eps_;  // the forward's, which the backward must repeat
  cudnnBatchNormOps_t ops_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, stats_desc_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  Tensor* reserve_ = nullptr;  // u8, planned for the whole step
};

}  // namespace cutrain
