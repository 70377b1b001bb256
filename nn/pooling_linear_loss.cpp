#include "nn/pooling_linear_loss.h"

#include <cmath>

#include "kernels/base/check.h"
#include "kernels/cast.h"
#include "kernels/cross_entropy.h"
#include "kernels/linear_cpu.h"
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
    : y(resources.plan.activation(resources.act_dtype(), {x.value.dim(0), x.value.dim(3)})),
      resources_(resources),
      x_(x) {
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

Linear::Linear(ModelResources& resources, const std::string& name, Activation& x, int out_features)
    : weight(resources.params.add(name + ".weight", {out_features, x.value.dim(1)}, false, Init::uniform,
                                  1.0f / std::sqrt(float(x.value.dim(1))))),
      bias(resources.params.add(name + ".bias", {out_features}, false, Init::uniform,
                                1.0f / std::sqrt(float(x.value.dim(1))))),
      y(resources.plan.activation(DType::f32, {x.value.dim(0), out_features})),
      resources_(resources),
      x_(x),
      n_(int(x.value.dim(0))),
      in_(int(x.value.dim(1))),
      out_(out_features) {
  resources.plan.reads(x);
  if (!resources.ctx.on_gpu()) return;
  ones_ = &resources.plan.constant({n_}, 1.0f);
  if (resources.act_dtype() == DType::bf16) dy_bf16_ = &resources.plan.tensor(DType::bf16, {n_, out_});
}

// cuBLAS is column-major: a row-major [R, C] matrix is a column-major [C, R] one with leading
// dimension C. So every product below is the transposed one: y^T = W x^T and so on.
namespace {

cudaDataType_t cuda_dtype(DType dtype) { return dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

cublasComputeType_t compute_type(const Context& ctx) {
  bool tf32 = ctx.dtype() == DType::f32 && ctx.options.allow_tf32;
  return tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

}  // namespace

void Linear::forward() {
  if (!resources_.ctx.on_gpu()) {
    linear_forward_cpu(x_.value.as<float>(), weight.value.as<float>(), bias.value.as<float>(), n_, in_, out_,
                       y.value.as<float>());
    return;
  }
  const Context& ctx = resources_.ctx;
  const float one = 1.0f, zero = 0.0f;
  // y^T[O,N] = b[O,1] ones[1,N]   (the bias in every column)
  CUBLAS_CHECK(cublasSgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, out_, n_, 1, &one, bias.value.as<float>(), out_,
                           ones_->as<float>(), 1, &zero, y.value.as<float>(), out_));
  // y^T[O,N] += W[O,I] x^T[I,N]   (W is column-major [I,O]: transposed)
  const void* w = weight.value_in(ctx.dtype());
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out_, n_, in_, &one, w, cuda_dtype(ctx.dtype()), in_,
                            x_.value.data, cuda_dtype(ctx.dtype()), in_, &one, y.value.data, CUDA_R_32F, out_,
                            compute_type(ctx), CUBLAS_GEMM_DEFAULT));
}

void Linear::backward() {
  if (!resources_.ctx.on_gpu()) {
    linear_backward_cpu(x_.value.as<float>(), weight.value.as<float>(), y.grad.as<float>(), n_, in_, out_, 0.0f,
                        x_.grad.as<float>(), weight.grad.as<float>(), bias.grad.as<float>());
  } else {
    backward_gpu();
  }
}

void Linear::backward_gpu() {
  const Context& ctx = resources_.ctx;
  const cudaStream_t stream = ctx.main_stream();  // cuBLAS is bound to it
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t t = cuda_dtype(ctx.dtype());
  const bool bf16 = ctx.dtype() == DType::bf16;
  // The products with x and W take dy in their own type: bf16 needs a rounded copy.
  const void* dy = y.grad.data;
  if (bf16) {
    cast_f32_to_bf16_cuda(y.grad.as<float>(), dy_bf16_->as<__nv_bfloat16>(), int64_t(n_) * out_, stream);
    dy = dy_bf16_->data;
  }
  // dW^T[I,O] = x^T[I,N] dy[N,O]   (dy is column-major [O,N]: transposed); fp32 out
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, n_, &one, x_.value.data, t, in_, dy, t,
                            out_, &zero, weight.grad.data, CUDA_R_32F, in_, compute_type(ctx), CUBLAS_GEMM_DEFAULT));
  // db[O] = dy^T[O,N] ones[N]   (fp32 dy, exact in both precisions)
  CUBLAS_CHECK(cublasSgemv(ctx.cublas, CUBLAS_OP_N, out_, n_, &one, y.grad.as<float>(), out_, ones_->as<float>(), 1,
                           &zero, bias.grad.as<float>(), 1));
  // dx^T[I,N] = W^T[I,O] dy^T[O,N]   (W is column-major [I,O]: as is)
  const void* w = weight.value_in(ctx.dtype());
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in_, n_, out_, &one, w, t, in_, dy, t, out_, &zero,
                            x_.grad.data, t, in_, compute_type(ctx), CUBLAS_GEMM_DEFAULT));
}

CrossEntropyLoss::CrossEntropyLoss(ModelResources& resources, Activation& logits, float label_smoothing)
    : labels(resources.plan.tensor(DType::i32, {logits.value.dim(0)})),
      loss(resources.plan.tensor(DType::f32, {1})),
      correct(resources.plan.tensor(DType::i32, {1})),
      resources_(resources),
      logits_(logits),
      label_smoothing_(label_smoothing) {
  resources.plan.reads(logits);  // in forward: see nn/memory_plan.h
}

void CrossEntropyLoss::forward() {
  const int N = int(logits_.value.dim(0)), K = int(logits_.value.dim(1));
  if (!resources_.ctx.on_gpu()) {
    softmax_cross_entropy_cpu(logits_.value.as<float>(), labels.as<int32_t>(), N, K, label_smoothing_, loss.as<float>(),
                              logits_.grad.as<float>(), correct.as<int32_t>());
  } else {
    softmax_cross_entropy_cuda(logits_.value.as<float>(), labels.as<int32_t>(), N, K, label_smoothing_,
                               loss.as<float>(), logits_.grad.as<float>(), correct.as<int32_t>(),
                               resources_.ctx.main_stream());
  }
}

}  // namespace cutrain
