#include "nn/conv2d.h"

#include <cmath>
#include <optional>
#include <stdexcept>

#include "kernels/base/check.h"
#include "nn/conv_algorithms.h"

namespace cutrain {

namespace {

cudnnDataType_t cudnn_dtype(DType dtype) { return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

// Runs one pass of a convolution on `stream`, where `run(algo)` makes its cuDNN call. An algorithm
// that fails when it runs is replaced and the call is made again (Note [Algorithm fallback]).
template <typename Algo, typename Run>
void run_with_fallback(const Context& ctx, cudaStream_t stream, const ConvDescriptors& d, const ConvShape& shape,
                       size_t workspace_bytes, const char* call, ConvAlgorithm<Algo>& algorithm, Run&& run) {
  for (;;) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, algorithm.math));
    const cudnnStatus_t status = run(algorithm.algo);
    if (status == CUDNN_STATUS_SUCCESS) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    std::optional<ConvAlgorithm<Algo>> next;
    const bool replaceable = status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_EXECUTION_FAILED ||
                             status == CUDNN_STATUS_BAD_PARAM;
    if (replaceable && capture == cudaStreamCaptureStatusNone)
      next = replace_failed_algorithm(ctx, d, shape, algorithm, status, workspace_bytes);
    if (!next) check_failed(call, __FILE__, __LINE__, cudnnGetErrorString(status));
    algorithm = *next;
  }
}

}  // namespace

// cuDNN's view of the layer: its descriptors, its chosen algorithms, and the copies of the
// parameter that it works on when they are not the parameter's own (the padded stem's filter, and
// dW in bf16 or padded).
struct Conv2d::Gpu {
  ConvDescriptors desc;
  ConvAlgorithms algos{};
  Tensor* filter = nullptr;  // the padded filter [K,R,S,C], or null to read the parameter's copy
  Tensor* dw = nullptr;      // dW in the activation dtype, or null to write the fp32 gradient

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

Conv2d::Conv2d(ModelResources& resources, const std::string& name, Activation& x, int in_channels, int out_channels,
               int kernel, int stride, int pad)
    : weight(resources.params.add(name + ".weight", {out_channels, in_channels, kernel, kernel}, /*ohwi=*/true,
                                  Init::normal, std::sqrt(2.0f / float(out_channels * kernel * kernel)))),
      y(resources.plan.activation(resources.act_dtype(),
                                  {x.value.dim(0), (x.value.dim(1) + 2 * pad - kernel) / stride + 1,
                                   (x.value.dim(2) + 2 * pad - kernel) / stride + 1, out_channels})),
      resources_(resources),
      x_(x),
      shape_{int(x.value.dim(0)),
             int(x.value.dim(1)),
             int(x.value.dim(2)),
             int(x.value.dim(3)),
             out_channels,
             kernel,
             kernel,
             stride,
             pad},
      in_channels_(in_channels) {
  resources.plan.reads(x);
  if (shape_.C < in_channels) throw std::logic_error(name + ": input has fewer channels than the filter");
  if (!resources.ctx.on_gpu()) {
    if (shape_.C != in_channels) throw std::logic_error(name + ": padded input channels are a GPU layout");
    return;
  }
  gpu_ = std::make_unique<Gpu>();
  gpu_->describe(shape_, resources.act_dtype());
  gpu_->algos = choose_conv_algorithms(resources.ctx, gpu_->desc, shape_);
  resources.plan.reserve_workspace(gpu_->algos.workspace());
  // The copies cuDNN works on, which SGD reads and writes in place.
  const std::vector<int64_t> filter_shape = {shape_.K, shape_.R, shape_.S, shape_.C};
  const bool padded = shape_.C != in_channels;
  if (padded) {
    gpu_->filter = &resources.plan.tensor(resources.act_dtype(), filter_shape);
    weight.layer_value = gpu_->filter;
    weight.layer_cols = in_channels;
    weight.layer_pitch = shape_.C;
  }
  if (padded || resources.act_dtype() == DType::bf16) {
    gpu_->dw = &resources.plan.tensor(resources.act_dtype(), filter_shape);
    weight.layer_grad = gpu_->dw;
  }
}

Conv2d::~Conv2d() = default;

// The filter cuDNN reads: the parameter's copy (or itself), or the padded stem filter.
const void* Conv2d::filter_data() const {
  return gpu_->filter ? gpu_->filter->data : weight.value_in(resources_.act_dtype());
}

void Conv2d::forward(cudaStream_t stream) {
  if (!gpu_) {
    conv2d_forward_cpu(x_.value.as<float>(), weight.value.as<float>(), shape_, y.value.as<float>());
    return;
  }
  const Context& ctx = resources_.ctx;
  const float one = 1.0f, zero = 0.0f;
  const ConvDescriptors& d = gpu_->desc;
  const cudnnHandle_t cudnn = ctx.cudnn(stream);
  void* workspace = resources_.plan.workspace(stream == ctx.side_stream());
  run_with_fallback(ctx, stream, d, shape_, resources_.plan.workspace_bytes(), "cudnnConvolutionForward",
                    gpu_->algos.forward, [&](cudnnConvolutionFwdAlgo_t algo) {
                      return cudnnConvolutionForward(cudnn, &one, d.x, x_.value.data, d.w, filter_data(), d.conv, algo,
                                                     workspace, resources_.plan.workspace_bytes(), &zero, d.y,
                                                     y.value.data);
                    });
}

// dW runs on the side stream while dX runs on the main one (Note [Side stream]). The side stream is
// joined before backward returns, so the gradient is final once the main stream's work so far is,
// and no later layer can write over the dy that dW reads (activation gradients share memory). The stem, with no dX, computes dW on the
// main stream.
void Conv2d::backward(float dx_beta) {
  const bool has_dx = !x_.grad.shape.empty();
  if (!gpu_) {
    conv2d_backward_filter_cpu(x_.value.as<float>(), y.grad.as<float>(), shape_, 0.0f, weight.grad.as<float>());
    if (has_dx)
      conv2d_backward_data_cpu(y.grad.as<float>(), weight.value.as<float>(), shape_, dx_beta, x_.grad.as<float>());
    return;
  }
  Context& ctx = resources_.ctx;
  if (has_dx) {
    ctx.fork();
    backward_filter(ctx.side_stream());
    backward_data(dx_beta, ctx.main_stream());
    ctx.join();
  } else {
    backward_filter(ctx.main_stream());
  }
}

// dW goes where SGD reads it, into the fp32 gradient or a copy in the activation dtype (for bf16
// and the padded stem).
void Conv2d::backward_filter(cudaStream_t stream) {
  const Context& ctx = resources_.ctx;
  const float one = 1.0f, zero = 0.0f;
  const ConvDescriptors& d = gpu_->desc;
  void* dw = gpu_->dw ? gpu_->dw->data : weight.grad.data;
  const cudnnHandle_t cudnn = ctx.cudnn(stream);
  void* workspace = resources_.plan.workspace(stream == ctx.side_stream());
  run_with_fallback(ctx, stream, d, shape_, resources_.plan.workspace_bytes(), "cudnnConvolutionBackwardFilter",
                    gpu_->algos.backward_filter, [&](cudnnConvolutionBwdFilterAlgo_t algo) {
                      return cudnnConvolutionBackwardFilter(cudnn, &one, d.x, x_.value.data, d.y, y.grad.data, d.conv,
                                                            algo, workspace, resources_.plan.workspace_bytes(), &zero,
                                                            d.w, dw);
                    });
}

void Conv2d::backward_data(float dx_beta, cudaStream_t stream) {
  const Context& ctx = resources_.ctx;
  const float one = 1.0f;
  const ConvDescriptors& d = gpu_->desc;
  const cudnnHandle_t cudnn = ctx.cudnn(stream);
  void* workspace = resources_.plan.workspace(stream == ctx.side_stream());
  run_with_fallback(ctx, stream, d, shape_, resources_.plan.workspace_bytes(), "cudnnConvolutionBackwardData",
                    gpu_->algos.backward_data, [&](cudnnConvolutionBwdDataAlgo_t algo) {
                      return cudnnConvolutionBackwardData(cudnn, &one, d.w, filter_data(), d.y, y.grad.data, d.conv,
                                                          algo, workspace, resources_.plan.workspace_bytes(), &dx_beta,
                                                          d.x, x_.grad.data);
                    });
}

}  // namespace cutrain
