#include "nn/cudnn_batchnorm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/base/check.h"

namespace cutrain {

namespace {

cudnnDataType_t cudnn_type(DType dtype) { return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

cudnnBatchNormOps_t ops_of(BatchNormFusion fusion) {
  if (fusion.residual) return CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  return fusion.relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

// Note [cuDNN's batch norm types]: the mode whose NHWC kernels the fused ops need.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

}  // namespace

CudnnBatchNorm::CudnnBatchNorm(ModelResources& resources, const Tensor& x, BatchNormFusion fusion, float eps)
    : resources_(resources),
      fusion_(fusion),
      eps_(eps),
      ops_(ops_of(fusion)) {
  if (fusion.residual && !fusion.relu)
    throw std::logic_error("cuDNN's batch norm adds the residual before a ReLU only");
  size_t reserve_bytes = 0;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NHWC, cudnn_type(x.dtype), int(x.dim(0)),
                                         int(x.dim(3)), int(x.dim(1)), int(x.dim(2))));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&stats_desc_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(stats_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, int(x.dim(3)), 1, 1));
  CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu_));
  CUDNN_CHECK(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  cudnnActivationDescriptor_t activation = fusion.relu ? relu_ : nullptr;
  cudnnTensorDescriptor_t z = fusion.residual ? x_desc_ : nullptr;
  const cudnnHandle_t handle = resources.ctx.cudnn(resources.ctx.main_stream());
  size_t forward = 0, backward = 0;
  CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, kMode, ops_, x_desc_, z, x_desc_,
                                                                       stats_desc_, activation, &forward));
  CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, kMode, ops_, x_desc_, x_desc_, x_desc_, z,
                                                                x_desc_, stats_desc_, activation, &backward));
  CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, ops_, activation, x_desc_,
                                                                   &reserve_bytes));
  resources.plan.reserve_workspace(std::max(forward, backward));
  reserve_ = &resources.plan.tensor(DType::u8, {int64_t(reserve_bytes)});
}

CudnnBatchNorm::~CudnnBatchNorm() {
  if (relu_) cudnnDestroyActivationDescriptor(relu_);
  if (stats_desc_) cudnnDestroyTensorDescriptor(stats_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
}

template <typename T>
void CudnnBatchNorm::forward_train(const BatchNormForward<T>& f) {
  const Context& ctx = resources_.ctx;
  const cudaStream_t stream = ctx.main_stream();  // batch norm runs on the main stream
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
      ctx.cudnn(stream), kMode, ops_, &one, &zero, x_desc_, f.x, fusion_.residual ? x_desc_ : nullptr, f.residual,
      x_desc_, f.y, stats_desc_, f.gamma, f.beta, double(f.momentum), f.running_mean, f.running_var, double(f.eps),
      f.mean, f.invstd, fusion_.relu ? relu_ : nullptr, resources_.plan.workspace(/*side_stream=*/false),
      resources_.plan.workspace_bytes(), reserve_->data, size_t(reserve_->numel())));
}

template <typename T>
void CudnnBatchNorm::backward(const BatchNormBackward<T>& b, const T* y, const float* beta) {
  const Context& ctx = resources_.ctx;
  const cudaStream_t stream = ctx.main_stream();  // batch norm runs on the main stream
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
      ctx.cudnn(stream), kMode, ops_, &one, &zero, &one, &zero, x_desc_, b.x, x_desc_, y, x_desc_, b.dy,
      fusion_.residual ? x_desc_ : nullptr, b.d_residual, x_desc_, b.dx, stats_desc_, b.gamma, beta, b.dgamma, b.dbeta,
      double(eps_), b.mean, b.invstd, fusion_.relu ? relu_ : nullptr, resources_.plan.workspace(/*side_stream=*/false),
      resources_.plan.workspace_bytes(), reserve_->data, size_t(reserve_->numel())));
}

template void CudnnBatchNorm::forward_train<float>(const BatchNormForward<float>&);
template void CudnnBatchNorm::forward_train<__nv_bfloat16>(const BatchNormForward<__nv_bfloat16>&);
template void CudnnBatchNorm::backward<float>(const BatchNormBackward<float>&, const float*, const float*);
template void CudnnBatchNorm::backward<__nv_bfloat16>(const BatchNormBackward<__nv_bfloat16>&, const __nv_bfloat16*,
                                                      const float*);

}  // namespace cutrain
