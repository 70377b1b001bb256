#include "nn/pooling.h"

#include "kernels/pooling.h"
#include "nn/dispatch.h"

namespace cutrain {

namespace {
// The four numbers every pooling kernel takes, from an NHWC activation.
struct Nhwc {
  int N, H, W, C;
  explicit Nhwc(const Tensor& t) : N(int(t.dim(0))), H(int(t.dim(1))), W(int(t.dim(2))), C(int(t.dim(3))) {}
};
}  // namespace

MaxPool2d::MaxPool2d(ModelResources& resources, Activation& x)
    : y(resources.plan.activation(resources.act_dtype(), {x.value.dim(0), maxpool_out_size(int(x.value.dim(1))),
                                              maxpool_out_size(int(x.value.dim(2))), x.value.dim(3)})),
      resources_(resources),
      x_(x) {
  resources.plan.reads(x);
}

void MaxPool2d::forward() {
  Nhwc s(x_.value);
  if (!resources_.ctx.on_gpu()) {
    maxpool3x3s2_forward_cpu(x_.value.as<float>(), s.N, s.H, s.W, s.C, y.value.as<float>());
    return;
  }
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    maxpool3x3s2_forward_cuda<T>(x_.value.as<T>(), s.N, s.H, s.W, s.C, y.value.as<T>(), resources_.ctx.main_stream());
  });
}

void MaxPool2d::backward() {
  Nhwc s(x_.value);
  if (!resources_.ctx.on_gpu()) {
    maxpool3x3s2_backward_cpu(x_.value.as<float>(), y.grad.as<float>(), s.N, s.H, s.W, s.C, x_.grad.as<float>());
    return;
  }
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    maxpool3x3s2_backward_cuda<T>(x_.value.as<T>(), y.grad.as<T>(), s.N, s.H, s.W, s.C, x_.grad.as<T>(),
                                  resources_.ctx.main_stream());
  });
}

GlobalAvgPool2d::GlobalAvgPool2d(ModelResources& resources, Activation& x)
    : y(resources.plan.activation(resources.act_dtype(), {x.value.dim(0), x.value.dim(3)})), resources_(resources), x_(x) {
  resources.plan.reads(x);
}

void GlobalAvgPool2d::forward() {
  Nhwc s(x_.value);
  if (!resources_.ctx.on_gpu()) {
    global_avgpool_forward_cpu(x_.value.as<float>(), s.N, s.H, s.W, s.C, y.value.as<float>());
    return;
  }
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    global_avgpool_forward_cuda<T>(x_.value.as<T>(), s.N, s.H, s.W, s.C, y.value.as<T>(), resources_.ctx.main_stream());
  });
}

void GlobalAvgPool2d::backward() {
  Nhwc s(x_.value);
  if (!resources_.ctx.on_gpu()) {
    global_avgpool_backward_cpu(y.grad.as<float>(), s.N, s.H, s.W, s.C, x_.grad.as<float>());
    return;
  }
  dispatch_activation(resources_.act_dtype(), [&](auto zero) {
    using T = decltype(zero);
    global_avgpool_backward_cuda<T>(y.grad.as<T>(), s.N, s.H, s.W, s.C, x_.grad.as<T>(), resources_.ctx.main_stream());
  });
}

}  // namespace cutrain
