#include "nn/batchnorm2d.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/check.h"
#include "nn/dispatch.h"

namespace cutrain {

BatchNorm2d::BatchNorm2d(Net& net, const std::string& name, Activation& x, bool relu, Activation* residual)
    : weight(net.params.add(name + ".weight", {x.value.dim(-1)}, false, Init::ones, 0)),
      bias(net.params.add(name + ".bias", {x.value.dim(-1)}, false, Init::zeros, 0)),
      running_mean(net.params.add_buffer(name + ".running_mean", x.value.dim(-1), 0.0f)),
      running_var(net.params.add_buffer(name + ".running_var", x.value.dim(-1), 1.0f)),
      y(net.plan.activation(net.act_dtype(), x.value.shape)),
      name_(name),
      net_(net),
      x_(x),
      residual_(residual),
      fusion_{relu, residual != nullptr},
      rows_(x.value.numel() / x.value.dim(-1)),
      channels_(int(x.value.dim(-1))),
      sums_(net.plan.tensor(DType::f32, {2 * x.value.dim(-1)})),
      mean_(net.plan.tensor(DType::f32, {x.value.dim(-1)})),
      invstd_(net.plan.tensor(DType::f32, {x.value.dim(-1)})) {
  net.plan.reads(x);
  if (residual) net.plan.reads(*residual);
}

// Rows over all ranks that take part in the statistics.
double BatchNorm2d::count() const {
  return double(rows_) * (net_.sync_batchnorm.enabled() ? net_.sync_batchnorm.world_size : 1);
}

void BatchNorm2d::forward(bool train) {
  if (train && count() < 2) {  // PyTorch's rule too: the unbiased variance needs two values
    throw std::runtime_error(name_ + ": batch norm in training needs more than one value per channel (batch " +
                             std::to_string(x_.value.dim(0)) + " x " + std::to_string(rows_ / x_.value.dim(0)) +
                             " pixels)");
  }
  const int C = channels_;
  float* s1 = sums_.as<float>();
  float* s2 = s1 + C;
  float* mean = mean_.as<float>();
  float* invstd = invstd_.as<float>();
  float* running_mean_data = running_mean.value.as<float>();
  float* running_var_data = running_var.value.as<float>();
  const float* gamma = weight.value.as<float>();
  const float* beta = bias.value.as<float>();
  if (!net_.ctx.on_gpu()) {
    if (train) {
      bn_channel_sums_cpu(x_.value.as<float>(), rows_, C, s1, s2);
      reduce_across_ranks(s1, 2 * C);
      bn_finalize_stats_cpu(s1, s2, C, count(), kEps, kMomentum, mean, invstd, running_mean_data, running_var_data);
    } else {
      bn_eval_stats_cpu(running_mean_data, running_var_data, C, kEps, mean, invstd);
    }
    bn_apply_cpu(x_.value.as<float>(), residual_ ? residual_->value.as<float>() : nullptr, rows_, C, mean, invstd,
                 gamma, beta, fusion_, y.value.as<float>());
    return;
  }
  cudaStream_t stream = net_.ctx.stream;
  dispatch_activation(net_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (train) {
      bn_channel_sums_cuda<T>(x_.value.as<T>(), rows_, C, s1, s2, stream);
      reduce_across_ranks(s1, 2 * C);
      bn_finalize_stats_cuda(s1, s2, C, count(), kEps, kMomentum, mean, invstd, running_mean_data, running_var_data,
                             stream);
    } else {
      bn_eval_stats_cuda(running_mean_data, running_var_data, C, kEps, mean, invstd, stream);
    }
    bn_apply_cuda<T>(x_.value.as<T>(), residual_ ? residual_->value.as<T>() : nullptr, rows_, C, mean, invstd, gamma,
                     beta, fusion_, y.value.as<T>(), stream);
  });
}

// The sums stage writes dbeta = t1 and dgamma = t2 straight into the gradient buffer. Under
// SyncBN the apply stage needs the sums over all ranks while the gradient buffer keeps this
// rank's share (DDP averages it later), so they are copied to sums_ and reduced there.
void BatchNorm2d::backward() {
  const int C = channels_;
  const float* mean = mean_.as<float>();
  const float* invstd = invstd_.as<float>();
  const float* gamma = weight.value.as<float>();
  float* dbeta = bias.grad.as<float>();
  float* dgamma = weight.grad.as<float>();
  const bool sync = net_.sync_batchnorm.enabled();
  float* t1 = sync ? sums_.as<float>() : dbeta;
  float* t2 = sync ? sums_.as<float>() + C : dgamma;
  if (!net_.ctx.on_gpu()) {
    bn_backward_sums_cpu(x_.value.as<float>(), y.value.as<float>(), y.grad.as<float>(), rows_, C, mean, invstd,
                         fusion_, dbeta, dgamma, residual_ ? residual_->grad.as<float>() : nullptr);
    if (sync) {
      std::copy_n(dbeta, C, t1);
      std::copy_n(dgamma, C, t2);
      reduce_across_ranks(t1, 2 * C);
    }
    bn_backward_apply_cpu(x_.value.as<float>(), y.value.as<float>(), y.grad.as<float>(), rows_, C, mean, invstd,
                          gamma, t1, t2, count(), fusion_, x_.grad.as<float>());
  } else {
    cudaStream_t stream = net_.ctx.stream;
    dispatch_activation(net_.act_dtype(), [&](auto zero) {
      using T = decltype(zero);
      bn_backward_sums_cuda<T>(x_.value.as<T>(), y.value.as<T>(), y.grad.as<T>(), rows_, C, mean, invstd, fusion_,
                               dbeta, dgamma, residual_ ? residual_->grad.as<T>() : nullptr, stream);
      if (sync) {
        CUDA_CHECK(cudaMemcpyAsync(t1, dbeta, C * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(t2, dgamma, C * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        reduce_across_ranks(t1, 2 * C);
      }
      bn_backward_apply_cuda<T>(x_.value.as<T>(), y.value.as<T>(), y.grad.as<T>(), rows_, C, mean, invstd, gamma, t1,
                                t2, count(), fusion_, x_.grad.as<T>(), stream);
    });
  }
  // Only now: the apply stage above may read dgamma and dbeta, which the reducer averages in place.
  net_.params.grad_done(weight);
  net_.params.grad_done(bias);
}

void BatchNorm2d::reduce_across_ranks(float* data, int count) const {
  if (net_.sync_batchnorm.enabled()) net_.sync_batchnorm.all_reduce_sum(data, size_t(count));
}

}  // namespace cutrain
