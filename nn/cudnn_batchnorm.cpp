#include "nn/cudnn_batchnorm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <stdexcept>

#include "kernels/base/check.h"

namespace cutrain {

namespace {

cudnnBatchNormOps_t ops_of(BatchNormFusion fusion) {
  if (fusion.residual) return CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  return fusion.relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

// Note [cuDNN's batch norm types]: the mode whose NHWC kernels the fused ops need.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

}  // namespace

CudnnBatchNorm::CudnnBatchNorm(ModelResources& resources, const Tensor& x, BatchNormFusion fusion, float eps)
    : resources_(resources), fusion_(fusion), eps_(eps), ops_(ops_of(fusion)) {
  if (fusion.residual && !fusion.relu)
    throw std::logic_error("cuDNN's batch norm adds the residual before a ReLU only");
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NHWC, cudnn_type(x.dtype), int(x.dim(0)), int(x.dim(3)),
                                         int(x.dim(1)), int(x.dim(2))));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&stats_desc_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(stats_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, int(x.dim(3)), 1, 1));
  CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu_));
  CUDNN_CHECK(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  const cudnnHandle_t handle = resources.ctx.cudnn(resources.ctx.main_stream());
  size_t forward = 0, backward = 0, reserve_bytes = 0;
  // The three size queries for ops_: the first refusal, else success.
  const auto query_sizes = [&] {
    cudnnStatus_t s = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        handle, kMode, ops_, x_desc_, z_desc(), x_desc_, stats_desc_, activation(), &forward);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, kMode, ops_, x_desc_, x_desc_, x_desc_, z_desc(),
                                                            x_desc_, stats_desc_, activation(), &backward);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, ops_, activation(), x_desc_,
                                                               &reserve_bytes);
    return s;
  };
  cudnnStatus_t size_queries = query_sizes();
  if (size_queries == CUDNN_STATUS_NOT_SUPPORTED && ops_ != CUDNN_BATCHNORM_OPS_BN) {
    // Note [cuDNN's batch norm types]: cuDNN's plain batch norm, then cutrain's activation.
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(stderr,
                   "cutrain: note: cuDNN does not fuse batch norm with ReLU on %s here (%s); --batchnorm cudnn runs "
                   "cuDNN's plain batch norm and cutrain's ReLU and add+ReLU kernels after it\n",
                   dtype_name(x.dtype), cudnnGetErrorString(size_queries));
    ops_ = CUDNN_BATCHNORM_OPS_BN;
    const BatchNormShape shape{x.numel() / x.dim(3), int(x.dim(3)), fusion};
    activation_plan_ = bn_plan(BatchNormPass::activation, shape, dtype_size(x.dtype), BatchNormDevice{});
    activation_backward_plan_ =
        bn_plan(BatchNormPass::activation_backward, shape, dtype_size(x.dtype), BatchNormDevice{});
    // Without a residual, the gradient behind the ReLU lives in the workspace, in front of cuDNN's.
    if (!fusion.residual) dz_bytes_ = (size_t(x.numel()) * dtype_size(x.dtype) + 255) / 256 * 256;
    size_queries = query_sizes();
  }
  CUDNN_CHECK(size_queries);
  resources.plan.reserve_workspace(std::max(forward, dz_bytes_ + backward));
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
      ctx.cudnn(stream), kMode, ops_, &one, &zero, x_desc_, f.x, z_desc(), fused() ? f.residual : nullptr, x_desc_, f.y,
      stats_desc_, f.gamma, f.beta, double(f.momentum), f.running_mean, f.running_var, double(f.eps), f.mean, f.invstd,
      activation(), resources_.plan.workspace(/*side_stream=*/false), resources_.plan.workspace_bytes(), reserve_->data,
      size_t(reserve_->numel())));
  if (!fused()) bn_activation_cuda<T>(activation_plan_, f.y, f.residual, f.relu_mask, stream);
}

template <typename T>
void CudnnBatchNorm::backward(const BatchNormBackward<T>& b, const T* y, const float* beta) {
  const Context& ctx = resources_.ctx;
  const cudaStream_t stream = ctx.main_stream();  // batch norm runs on the main stream
  const float one = 1.0f, zero = 0.0f;
  char* workspace = static_cast<char*>(resources_.plan.workspace(/*side_stream=*/false));
  const T* dy = b.dy;
  if (!fused()) {  // dz = dy behind the ReLU: the residual's gradient, or in front of the workspace
    T* dz = fusion_.residual ? b.d_residual : reinterpret_cast<T*>(workspace);
    bn_activation_backward_cuda<T>(activation_backward_plan_, b.dy, b.relu_mask, dz, stream);
    dy = dz;
  }
  CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
      ctx.cudnn(stream), kMode, ops_, &one, &zero, &one, &zero, x_desc_, b.x, x_desc_, y, x_desc_, dy, z_desc(),
      fused() ? b.d_residual : nullptr, x_desc_, b.dx, stats_desc_, b.gamma, beta, b.dgamma, b.dbeta, double(eps_),
      b.mean, b.invstd, activation(), workspace + dz_bytes_, resources_.plan.workspace_bytes() - dz_bytes_,
      reserve_->data, size_t(reserve_->numel())));
}

template void CudnnBatchNorm::forward_train<float>(const BatchNormForward<float>&);
template void CudnnBatchNorm::forward_train<__nv_bfloat16>(const BatchNormForward<__nv_bfloat16>&);
template void CudnnBatchNorm::backward<float>(const BatchNormBackward<float>&, const float*, const float*);
template void CudnnBatchNorm::backward<__nv_bfloat16>(const BatchNormBackward<__nv_bfloat16>&, const __nv_bfloat16*,
                                                      const float*);

}  // namespace cutrain
