#include "nn/conv2d.h"

#include <cmath>
#include <stdexcept>

#include <cuda_bf16.h>

#include "kernels/check.h"
#include "kernels/copy_rows.h"
#include "nn/conv_algorithms.h"
#include "nn/dispatch.h"

namespace cutrain {

namespace {

cudnnDataType_t cudnn_dtype(DType dtype) { return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

}  // namespace

// cuDNN's view of the layer: descriptors, chosen algorithms, and the filter / filter-gradient
// staging buffers when the parameter cannot be used in place (padded stem, bf16).
struct Conv2d::Gpu {
  ConvDescriptors desc;
  ConvAlgorithms algos{};
  Tensor* filter = nullptr;     // padded filter [K,R,S,C] (null: read the parameter directly)
  Tensor* dw_staged = nullptr;  // filter gradient in the activation dtype (null: write the fp32 grad)

  ~Gpu() {
    if (desc.conv) cudnnDestroyConvolutionDescriptor(desc.conv);
    if (desc.w) cudnnDestroyFilterDescriptor(desc.w);
    if (desc.y) cudnnDestroyTensorDescriptor(desc.y);
    if (desc.x) cudnnDestroyTensorDescriptor(desc.x);
  }

  void describe(const ConvShape& s, DType dtype) {
    cudnnDataType_t t = cudnn_dtype(dtype);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc.x));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.x, CUDNN_TENSOR_NHWC, t, s.N, s.C, s.H, s.W));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc.y));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.y, CUDNN_TENSOR_NHWC, t, s.N, s.K, s.P(), s.Q()));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc.w));  // NHWC filter format = KRSC
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc.w, t, CUDNN_TENSOR_NHWC, s.K, s.C, s.R, s.S));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc.conv));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc.conv, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }
};

Conv2d::Conv2d(Net& net, const std::string& name, Activation& x, int in_channels, int out_channels, int kernel,
               int stride, int pad)
    : weight(net.params.add(name + ".weight", {out_channels, in_channels, kernel, kernel}, /*ohwi=*/true,
                            Init::normal, std::sqrt(2.0f / float(out_channels * kernel * kernel)))),
      y(net.plan.activation(net.act_dtype(),
                            {x.value.dim(0),
                             (x.value.dim(1) + 2 * pad - kernel) / stride + 1,
                             (x.value.dim(2) + 2 * pad - kernel) / stride + 1, out_channels})),
      net_(net),
      x_(x),
      shape_{int(x.value.dim(0)), int(x.value.dim(1)), int(x.value.dim(2)), int(x.value.dim(3)),
             out_channels, kernel, kernel, stride, pad},
      in_channels_(in_channels) {
  net.plan.reads(x);
  if (shape_.C < in_channels) throw std::logic_error(name + ": input has fewer channels than the filter");
  if (!net.ctx.on_gpu()) {
    if (shape_.C != in_channels) throw std::logic_error(name + ": padded input channels are a GPU layout");
    return;
  }
  gpu_ = std::make_unique<Gpu>();
  gpu_->describe(shape_, net.act_dtype());
  gpu_->algos = choose_conv_algorithms(net.ctx, gpu_->desc, shape_);
  net.plan.reserve_workspace(gpu_->algos.workspace());
  std::vector<int64_t> filter_shape = {shape_.K, shape_.R, shape_.S, shape_.C};
  bool padded = shape_.C != in_channels;
  if (padded) gpu_->filter = &net.plan.tensor(net.act_dtype(), filter_shape);
  if (padded || net.act_dtype() == DType::bf16) gpu_->dw_staged = &net.plan.tensor(net.act_dtype(), filter_shape);
}

Conv2d::~Conv2d() = default;

// The filter cuDNN reads: the parameter itself, or the padded stem filter.
const void* Conv2d::filter_data() const {
  return gpu_->filter ? gpu_->filter->data : weight.value_in(net_.act_dtype());
}

void Conv2d::forward() {
  if (!gpu_) {
    conv2d_forward_cpu(x_.value.as<float>(), weight.value.as<float>(), shape_, y.value.as<float>());
    return;
  }
  const Context& ctx = net_.ctx;
  const int64_t rows = int64_t(shape_.K) * shape_.R * shape_.S;  // OHWI rows of in_channels_ each
  if (gpu_->filter) {  // this step's weights into the real channels of the padded filter
    dispatch_activation(net_.act_dtype(), [&](auto zero) {
      using T = decltype(zero);
      const auto* w = static_cast<const T*>(weight.value_in(net_.act_dtype()));
      copy_rows_cuda<T, T>(w, in_channels_, gpu_->filter->as<T>(), shape_.C, rows, in_channels_, ctx.stream);
    });
  }
  const float one = 1.0f, zero = 0.0f;
  const ConvDescriptors& d = gpu_->desc;
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, gpu_->algos.forward.math));
  CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn, &one, d.x, x_.value.data, d.w, filter_data(), d.conv,
                                      gpu_->algos.forward.algo, net_.plan.workspace(), net_.plan.workspace_bytes(),
                                      &zero, d.y, y.value.data));
}

void Conv2d::backward(float dx_beta) {
  if (!gpu_) {
    conv2d_backward_filter_cpu(x_.value.as<float>(), y.grad.as<float>(), shape_, 0.0f, weight.grad.as<float>());
    net_.params.grad_done(weight);
    if (x_.grad.shape.empty()) return;
    conv2d_backward_data_cpu(y.grad.as<float>(), weight.value.as<float>(), shape_, dx_beta, x_.grad.as<float>());
    return;
  }
  const Context& ctx = net_.ctx;
  const float one = 1.0f, zero = 0.0f;
  // dw: straight into the fp32 gradient buffer, or staged (bf16, padded) and then widened.
  void* dw = gpu_->dw_staged ? gpu_->dw_staged->data : weight.grad.data;
  const ConvDescriptors& d = gpu_->desc;
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, gpu_->algos.backward_filter.math));
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn, &one, d.x, x_.value.data, d.y, y.grad.data, d.conv,
                                             gpu_->algos.backward_filter.algo, net_.plan.workspace(),
                                             net_.plan.workspace_bytes(), &zero, d.w, dw));
  if (gpu_->dw_staged) {
    const int64_t rows = int64_t(shape_.K) * shape_.R * shape_.S;
    dispatch_activation(net_.act_dtype(), [&](auto zero_value) {
      using T = decltype(zero_value);
      copy_rows_cuda<T, float>(gpu_->dw_staged->as<T>(), shape_.C, weight.grad.as<float>(), in_channels_, rows,
                               in_channels_, ctx.stream);
    });
  }
  net_.params.grad_done(weight);
  if (x_.grad.shape.empty()) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, gpu_->algos.backward_data.math));
  CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn, &one, d.w, filter_data(), d.y, y.grad.data, d.conv,
                                           gpu_->algos.backward_data.algo, net_.plan.workspace(),
                                           net_.plan.workspace_bytes(), &dx_beta, d.x, x_.grad.data));
}

}  // namespace cutrain
