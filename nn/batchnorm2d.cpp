#include "nn/batchnorm2d.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "nn/dispatch.h"

namespace cutrain {

int64_t BatchNorm2d::GpuPlans::partial_floats() const {
  int64_t floats = std::max({forward_train.partial_floats, backward.partial_floats, rank_statistics.partial_floats,
                             backward_sums.partial_floats});
  for (const auto& fused : {forward_statistics, backward_recompute})
    if (fused) floats = std::max(floats, fused->partial_floats);
  return floats;
}

BatchNorm2d::GpuPlans BatchNorm2d::plan_gpu(const BatchNormShape& shape, size_t element_bytes, BatchNormLaunch launch,
                                            bool before_fused_conv) {
  const BatchNormDevice device = bn_device_of_current_gpu();
  const auto plan = [&](BatchNormPass pass) {
    BatchNormPlan p = bn_plan(pass, shape, element_bytes, device, launch);
    bn_prepare_launch(p);
    return p;
  };
  GpuPlans plans{plan(BatchNormPass::forward_train),   plan(BatchNormPass::forward_eval),
                 plan(BatchNormPass::backward),        plan(BatchNormPass::rank_statistics),
                 plan(BatchNormPass::rank_m2),         plan(BatchNormPass::forward_apply),
                 plan(BatchNormPass::backward_sums),   plan(BatchNormPass::backward_apply),
                 std::nullopt,                         std::nullopt};
  if (before_fused_conv) {
    plans.forward_statistics = plan(BatchNormPass::forward_statistics);
    plans.backward_recompute = plan(BatchNormPass::backward_recompute);
  }
  return plans;
}

BatchNorm2d::BatchNorm2d(ModelResources& resources, const std::string& name, Activation& x, bool relu,
                         Activation* residual, bool before_fused_conv)
    : weight(resources.params.add(name + ".weight", {x.value.dim(-1)}, false, Init::ones, 0)),
      bias(resources.params.add(name + ".bias", {x.value.dim(-1)}, false, Init::zeros, 0)),
      running_mean(resources.params.add_buffer(name + ".running_mean", x.value.dim(-1), 0.0f)),
      running_var(resources.params.add_buffer(name + ".running_var", x.value.dim(-1), 1.0f)),
      y(resources.plan.activation(resources.act_dtype(), x.value.shape)),
      name_(name),
      resources_(resources),
      x_(x),
      residual_(residual),
      shape_{x.value.numel() / x.value.dim(-1), int(x.value.dim(-1)), BatchNormFusion{relu, residual != nullptr}},
      plans_(resources.ctx.on_gpu() ? plan_gpu(shape_, dtype_size(resources.act_dtype()),
                                               resources.ctx.options.batchnorm == BatchNormImplementation::split
                                                   ? BatchNormLaunch::split
                                                   : BatchNormLaunch::cooperative,
                                               before_fused_conv)
                                    : GpuPlans{}),
      mean_(resources.plan.tensor(DType::f32, {shape_.channels})),
      invstd_(resources.plan.tensor(DType::f32, {shape_.channels})),
      relu_mask_(resources.plan.tensor(DType::u8, {relu ? bn_mask_bytes(shape_) : 0})),
      sync_stats_(resources.plan.tensor(DType::f32, {4 * shape_.channels})),
      partials_(resources.plan.tensor(DType::f32, {resources.ctx.on_gpu() ? plans_.partial_floats() : 0})) {
  weight.norm = bias.norm = true;
  resources.plan.reads(x);
  if (residual) resources.plan.reads(*residual);
  if (resources.ctx.on_gpu() && resources.ctx.options.batchnorm == BatchNormImplementation::cudnn)
    cudnn_ = std::make_unique<CudnnBatchNorm>(resources, x.value, shape_.fusion, kEps);
}

BatchNorm2d::~BatchNorm2d() = default;

// Rows over all ranks that take part in the statistics.
double BatchNorm2d::count() const {
  return double(shape_.rows) * (synced() ? resources_.sync_batchnorm.world_size : 1);
}

template <typename T>
BatchNormForward<T> BatchNorm2d::forward_tensors() const {
  BatchNormForward<T> f;
  f.x = x_.value.as<T>();
  f.residual = residual_ ? residual_->value.as<T>() : nullptr;
  f.gamma = weight.value.as<float>();
  f.beta = bias.value.as<float>();
  f.eps = kEps;
  f.momentum = kMomentum;
  f.y = y.value.as<T>();
  f.relu_mask = relu_mask_.as<uint8_t>();
  f.mean = mean_.as<float>();
  f.invstd = invstd_.as<float>();
  f.running_mean = running_mean.value.as<float>();
  f.running_var = running_var.value.as<float>();
  return f;
}

template <typename T>
BatchNormBackward<T> BatchNorm2d::backward_tensors() const {
  BatchNormBackward<T> b;
  b.x = x_.value.as<T>();
  b.dy = y.grad.as<T>();
  b.relu_mask = relu_mask_.as<uint8_t>();
  b.mean = mean_.as<float>();
  b.invstd = invstd_.as<float>();
  b.gamma = weight.value.as<float>();
  b.dx = x_.grad.as<T>();
  b.d_residual = residual_ ? residual_->grad.as<T>() : nullptr;
  b.dgamma = weight.grad.as<float>();
  b.dbeta = bias.grad.as<float>();
  return b;
}

// Under SyncBatchNorm the forward is staged. Each rank computes its statistics, the sums are
// all-reduced, each rank computes its share of m2 about the global mean, that is all-reduced too,
// and then the apply stage runs.
void BatchNorm2d::check_count() const {
  if (count() < 2) {  // PyTorch's rule too, since the unbiased variance needs two values
    throw std::runtime_error(name_ + ": batch norm in training needs more than one value per channel (batch " +
                             std::to_string(x_.value.dim(0)) + " x " + std::to_string(shape_.rows / x_.value.dim(0)) +
                             " pixels)");
  }
}

void BatchNorm2d::forward(bool train) {
  if (train) check_count();
  const int C = shape_.channels;
  const BatchNormRankStats stats = BatchNormRankStats::in(sync_stats_.as<float>(), C);
  if (!resources_.ctx.on_gpu()) {
    const BatchNormForward<float> f = forward_tensors<float>();
    if (!train) {
      bn_forward_eval_cpu(shape_, f);
    } else if (!synced()) {
      bn_forward_train_cpu(shape_, f);
    } else {
      bn_rank_statistics_cpu(shape_, f.x, stats);
      reduce_across_ranks(stats.sum, C);
      bn_rank_m2_cpu(shape_, stats, count());
      reduce_across_ranks(stats.m2, C);
      bn_forward_apply_cpu(shape_, f, stats, count());
    }
    return;
  }
  cudaStream_t stream = resources_.ctx.main_stream();
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const BatchNormForward<T> f = forward_tensors<T>();
    if (!train) {
      bn_forward_eval_cuda<T>(plans_.forward_eval, f, stream);
    } else if (cudnn_ && !synced()) {
      cudnn_->forward_train(f);
    } else if (!synced()) {
      bn_forward_train_cuda<T>(plans_.forward_train, f, partials_.as<float>(), stream);
    } else {
      bn_rank_statistics_cuda<T>(plans_.rank_statistics, f.x, stats, partials_.as<float>(), stream);
      reduce_across_ranks(stats.sum, C);
      bn_rank_m2_cuda(plans_.rank_m2, stats, count(), stream);
      reduce_across_ranks(stats.m2, C);
      bn_forward_apply_cuda<T>(plans_.forward_apply, f, stats, count(), stream);
    }
  });
}

// dgamma and dbeta go straight into the gradient buffer as this rank's share (DDP averages them
// later). Under SyncBatchNorm the apply stage needs the sums over all ranks, so the sums stage
// also writes them to sync_stats_, which is all-reduced.
void BatchNorm2d::backward() {
  const int C = shape_.channels;
  float* sums = sync_stats_.as<float>();
  if (!resources_.ctx.on_gpu()) {
    const BatchNormBackward<float> b = backward_tensors<float>();
    if (!synced()) {
      bn_backward_cpu(shape_, b);
    } else {
      bn_backward_sums_cpu(shape_, b, sums);
      reduce_across_ranks(sums, 2 * C);
      bn_backward_apply_cpu(shape_, b, sums, count());
    }
  } else {
    cudaStream_t stream = resources_.ctx.main_stream();
    dispatch_activation(resources_.act_dtype(), [&](auto zero) {
      using T = decltype(zero);
      const BatchNormBackward<T> b = backward_tensors<T>();
      if (cudnn_ && !synced()) {
        cudnn_->backward(b, y.value.as<T>(), bias.value.as<float>());
      } else if (!synced()) {
        bn_backward_cuda<T>(plans_.backward, b, partials_.as<float>(), stream);
      } else {
        bn_backward_sums_cuda<T>(plans_.backward_sums, b, sums, partials_.as<float>(), stream);
        reduce_across_ranks(sums, 2 * C);
        bn_backward_apply_cuda<T>(plans_.backward_apply, b, sums, count(), stream);
      }
    });
  }
}

void BatchNorm2d::forward_statistics(float* scale, float* shift) {
  if (!plans_.forward_statistics) throw std::logic_error(name_ + ": not planned before a fused convolution");
  check_count();
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    bn_forward_statistics_cuda<T>(*plans_.forward_statistics, forward_tensors<T>(), scale, shift, partials_.as<float>(),
                                  resources_.ctx.main_stream());
  });
}

void BatchNorm2d::backward_recompute(const float* scale, const float* shift) {
  if (!plans_.backward_recompute) throw std::logic_error(name_ + ": not planned before a fused convolution");
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    bn_backward_recompute_cuda<T>(*plans_.backward_recompute, backward_tensors<T>(), scale, shift, y.value.as<T>(),
                                  partials_.as<float>(), resources_.ctx.main_stream());
  });
}

void BatchNorm2d::reduce_across_ranks(float* data, int count) const {
  resources_.sync_batchnorm.all_reduce_sum(data, size_t(count));
}

}  // namespace cutrain
