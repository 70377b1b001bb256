#include "nn/conv2d.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include <cuda_bf16.h>

#include "kernels/check.h"
#include "kernels/copy_rows.h"
#include "nn/dispatch.h"

namespace cutrain {

namespace {

cudnnDataType_t cudnn_dtype(DType dtype) { return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

// The algorithms of one convolution shape, measured once per process (every ResNet-18 has
// several convolutions of the same shape, and the trainer's eval model shares them too).
struct ConvAlgorithms {
  cudnnConvolutionFwdAlgo_t forward;
  cudnnConvolutionBwdDataAlgo_t backward_data;
  cudnnConvolutionBwdFilterAlgo_t backward_filter;
  cudnnMathType_t forward_math, backward_data_math, backward_filter_math;
  size_t workspace;  // the most any of the three needs
};

// The math type cuDNN may use: tensor cores for bf16; for fp32, plain FMA unless TF32 is allowed.
cudnnMathType_t allowed_math(const Context& ctx) {
  if (ctx.dtype() == DType::bf16) return CUDNN_TENSOR_OP_MATH;
  return ctx.options.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

// A workspace beyond this buys little speed for ResNet-18's shapes and would crowd out the batch.
constexpr size_t kMaxWorkspaceBytes = size_t(512) << 20;

// cudnnFind* returns its candidates fastest first; take the first that ran, fits the workspace
// limit, is deterministic when that is asked for, and (fp32 without TF32) avoids tensor cores.
template <typename Perf>
const Perf& fastest_usable(const Perf* perf, int count, const Context& ctx, const char* what) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    bool tensor_op = p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspaceBytes) continue;
    if (ctx.options.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (ctx.dtype() == DType::f32 && !ctx.options.allow_tf32 && tensor_op) continue;
    return p;
  }
  throw std::runtime_error(std::string("cuDNN found no usable ") + what + " algorithm");
}

}  // namespace

// cuDNN's view of the layer: descriptors, chosen algorithms, and the filter / filter-gradient
// staging buffers when the parameter cannot be used in place (padded stem, bf16).
struct Conv2d::Gpu {
  cudnnTensorDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnFilterDescriptor_t w_desc = nullptr;
  cudnnConvolutionDescriptor_t conv_desc = nullptr;
  ConvAlgorithms algos{};
  Tensor* filter = nullptr;     // padded filter [K,R,S,C] (null: read the parameter directly)
  Tensor* dw_staged = nullptr;  // filter gradient in the activation dtype (null: write the fp32 grad)

  ~Gpu() {
    if (conv_desc) cudnnDestroyConvolutionDescriptor(conv_desc);
    if (w_desc) cudnnDestroyFilterDescriptor(w_desc);
    if (y_desc) cudnnDestroyTensorDescriptor(y_desc);
    if (x_desc) cudnnDestroyTensorDescriptor(x_desc);
  }

  void describe(const ConvShape& s, DType dtype) {
    cudnnDataType_t t = cudnn_dtype(dtype);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc, CUDNN_TENSOR_NHWC, t, s.N, s.C, s.H, s.W));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc, CUDNN_TENSOR_NHWC, t, s.N, s.K, s.P(), s.Q()));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc));  // NHWC filter format = KRSC
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc, t, CUDNN_TENSOR_NHWC, s.K, s.C, s.R, s.S));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_desc));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }

  ConvAlgorithms measure(const Context& ctx) const {
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc, allowed_math(ctx)));
    constexpr int kMax = 16;
    int count = 0;
    ConvAlgorithms a{};
    cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(ctx.cudnn, x_desc, w_desc, conv_desc, y_desc, kMax, &count, fwd));
    const auto& f = fastest_usable(fwd, count, ctx, "forward convolution");
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[kMax];
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(ctx.cudnn, w_desc, y_desc, conv_desc, x_desc, kMax, &count,
                                                          bwd_data));
    const auto& d = fastest_usable(bwd_data, count, ctx, "backward-data convolution");
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[kMax];
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(ctx.cudnn, x_desc, y_desc, conv_desc, w_desc, kMax,
                                                            &count, bwd_filter));
    const auto& w = fastest_usable(bwd_filter, count, ctx, "backward-filter convolution");
    a.forward = f.algo;
    a.backward_data = d.algo;
    a.backward_filter = w.algo;
    // Run each with the math type it was measured with; strict fp32 pins FMA, because a result's
    // CUDNN_DEFAULT_MATH would let Ampere and newer use TF32.
    const bool strict_fp32 = allowed_math(ctx) == CUDNN_FMA_MATH;
    a.forward_math = strict_fp32 ? CUDNN_FMA_MATH : f.mathType;
    a.backward_data_math = strict_fp32 ? CUDNN_FMA_MATH : d.mathType;
    a.backward_filter_math = strict_fp32 ? CUDNN_FMA_MATH : w.mathType;
    a.workspace = std::max({f.memory, d.memory, w.memory});
    return a;
  }

  // One measurement per (shape, dtype, options) for the whole process.
  ConvAlgorithms cached_measure(const Context& ctx, const ConvShape& s) const {
    static std::mutex mutex;
    static std::map<std::string, ConvAlgorithms> cache;
    std::string key = std::to_string(s.N) + "," + std::to_string(s.H) + "," + std::to_string(s.W) + "," +
                      std::to_string(s.C) + "," + std::to_string(s.K) + "," + std::to_string(s.R) + "," +
                      std::to_string(s.S) + "," + std::to_string(s.stride) + "," + std::to_string(s.pad) + "," +
                      dtype_name(ctx.dtype()) + (ctx.options.deterministic ? ",det" : "") +
                      (ctx.options.allow_tf32 ? ",tf32" : "");
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, measure(ctx)).first;
    return it->second;
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
  gpu_->algos = gpu_->cached_measure(net.ctx, shape_);
  net.plan.reserve_workspace(gpu_->algos.workspace);
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
  CUDNN_CHECK(cudnnSetConvolutionMathType(gpu_->conv_desc, gpu_->algos.forward_math));
  CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn, &one, gpu_->x_desc, x_.value.data, gpu_->w_desc, filter_data(),
                                      gpu_->conv_desc, gpu_->algos.forward, net_.plan.workspace(),
                                      net_.plan.workspace_bytes(), &zero, gpu_->y_desc, y.value.data));
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
  CUDNN_CHECK(cudnnSetConvolutionMathType(gpu_->conv_desc, gpu_->algos.backward_filter_math));
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn, &one, gpu_->x_desc, x_.value.data, gpu_->y_desc,
                                             y.grad.data, gpu_->conv_desc, gpu_->algos.backward_filter,
                                             net_.plan.workspace(), net_.plan.workspace_bytes(), &zero,
                                             gpu_->w_desc, dw));
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
  CUDNN_CHECK(cudnnSetConvolutionMathType(gpu_->conv_desc, gpu_->algos.backward_data_math));
  CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn, &one, gpu_->w_desc, filter_data(), gpu_->y_desc, y.grad.data,
                                           gpu_->conv_desc, gpu_->algos.backward_data, net_.plan.workspace(),
                                           net_.plan.workspace_bytes(), &dx_beta, gpu_->x_desc, x_.grad.data));
}

}  // namespace cutrain
