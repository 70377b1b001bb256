#include "nn/conv2d.h"

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/base/check.h"
#include "nn/conv_engines.h"

namespace cutrain {

// One pass as this layer runs it: the plan it shares with every layer of its shape (nn/conv_engines.h),
// and a variant pack for each stream's workspace, indexed by whether the stream is the side
// stream, as the workspace is (Note [Side stream]).
struct Conv2d::Pass {
  ConvPass pass;
  const ConvPlan* plan;
  std::optional<BackendDescriptor> packs[2];
};

// The layer's passes, and the copies of the parameter that cuDNN works on when they are not the
// parameter's own (the padded stem's filter, and dW in bf16 or padded).
struct Conv2d::Gpu {
  std::optional<Pass> forward, backward_data, backward_filter;
  std::optional<Pass> forward_with_prologue;  // and what its prologue reads:
  const Activation* raw = nullptr;
  const Tensor* scale = nullptr;
  const Tensor* shift = nullptr;
  Tensor* filter = nullptr;  // the padded filter [K,R,S,C], or null to read the parameter's copy
  Tensor* dw = nullptr;      // dW in the activation dtype, or null to write the fp32 gradient
};

Conv2d::Conv2d(ModelResources& resources, const std::string& name, Activation& x, int in_channels, int out_channels,
               int kernel, int stride, int pad, bool adds_input_grad)
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
      dx_beta_(adds_input_grad ? 1.0f : 0.0f) {
  resources.plan.reads(x);
  if (shape_.C < in_channels) throw std::logic_error(name + ": input has fewer channels than the filter");
  if (!resources.ctx.on_gpu()) {
    if (shape_.C != in_channels) throw std::logic_error(name + ": padded input channels are a GPU layout");
    return;
  }
  gpu_ = std::make_unique<Gpu>();
  const Context& ctx = resources.ctx;
  auto plan = [&](ConvPass pass) {
    const ConvPlan& chosen = conv_plan(ctx, pass, shape_);
    resources.plan.reserve_workspace(chosen.workspace());
    return Pass{pass, &chosen, {}};
  };
  gpu_->forward = plan(ConvPass::forward);
  if (!x.grad.shape.empty())
    gpu_->backward_data = plan(adds_input_grad ? ConvPass::backward_data_accumulate : ConvPass::backward_data);
  gpu_->backward_filter = plan(ConvPass::backward_filter);
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

void Conv2d::bind() {
  if (!gpu_) return;
  const MemoryPlan& memory = resources_.plan;
  void* dw = gpu_->dw ? gpu_->dw->data : weight.grad.data;
  auto finalize_packs = [&](std::optional<Pass>& pass, ConvPointers pointers) {
    if (!pass) return;
    for (int side = 0; side < 2; ++side) {
      pointers.workspace = memory.workspace(side == 1);
      pass->packs[side].emplace(ConvGraph::variant_pack(pointers));
    }
  };
  finalize_packs(gpu_->forward, {x_.value.data, filter_data(), y.value.data});
  if (gpu_->forward_with_prologue) {
    finalize_packs(gpu_->forward_with_prologue, {gpu_->raw->value.data, filter_data(), y.value.data, nullptr,
                                                 gpu_->scale->as<float>(), gpu_->shift->as<float>()});
  }
  finalize_packs(gpu_->backward_data, {x_.grad.data, filter_data(), y.grad.data});
  finalize_packs(gpu_->backward_filter, {x_.value.data, dw, y.grad.data});
}

// Runs one pass on `stream`. A plan that fails when it runs is replaced and the pass runs again
// (Note [Engine fallback]).
void Conv2d::run(Pass& pass, cudaStream_t stream) {
  const cudnnStatus_t status = try_run(pass, stream);
  if (status != CUDNN_STATUS_SUCCESS) {
    const std::string call = std::string("cudnnBackendExecute (") + conv_pass_name(pass.pass) + ")";
    check_failed(call.c_str(), __FILE__, __LINE__, status);
  }
}

cudnnStatus_t Conv2d::try_run(Pass& pass, cudaStream_t stream) {
  const Context& ctx = resources_.ctx;
  const std::optional<BackendDescriptor>& pack = pass.packs[stream == ctx.side_stream() ? 1 : 0];
  if (!pack) throw std::logic_error("Conv2d: run before bind()");
  for (;;) {
    const cudnnStatus_t status = cudnnBackendExecute(ctx.cudnn(stream), pass.plan->get(), pack->get());
    if (status == CUDNN_STATUS_SUCCESS) return status;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const ConvPlan* next = nullptr;
    if (replaceable_failure(status) && capture == cudaStreamCaptureStatusNone)
      next = replace_failed_plan(ctx, pass.pass, shape_, *pass.plan, status, resources_.plan.workspace_bytes());
    if (!next) return status;
    pass.plan = next;
  }
}

bool Conv2d::plan_prologue(Activation& raw, const Tensor& scale, const Tensor& shift, std::string& why) {
  if (!gpu_) throw std::logic_error("Conv2d::plan_prologue: GPU only");
  if (raw.value.shape != x_.value.shape) throw std::logic_error("Conv2d::plan_prologue: raw is not x's shape");
  const ConvPlan* plan = try_conv_plan(resources_.ctx, ConvPass::forward_scale_shift_relu, shape_, why);
  if (!plan) return false;
  resources_.plan.reserve_workspace(plan->workspace());
  gpu_->forward_with_prologue = Pass{ConvPass::forward_scale_shift_relu, plan, {}};
  gpu_->raw = &raw;
  gpu_->scale = &scale;
  gpu_->shift = &shift;
  return true;
}

bool Conv2d::try_prologue(std::string& why) {
  if (!gpu_ || !gpu_->forward_with_prologue) throw std::logic_error("Conv2d::try_prologue: no prologue planned");
  const Context& ctx = resources_.ctx;
  const cudnnStatus_t status = try_run(*gpu_->forward_with_prologue, ctx.main_stream());
  if (status == CUDNN_STATUS_SUCCESS) {
    ctx.synchronize();
    return true;
  }
  why = std::string("its plan failed to run: ") + cudnnGetErrorString(status);
  gpu_->forward_with_prologue.reset();
  return false;
}

void Conv2d::forward_with_prologue(cudaStream_t stream) {
  if (!gpu_ || !gpu_->forward_with_prologue) throw std::logic_error("Conv2d::forward_with_prologue: none planned");
  run(*gpu_->forward_with_prologue, stream);
}

void Conv2d::backward_data() {
  if (!gpu_ || !gpu_->backward_data) throw std::logic_error("Conv2d::backward_data: GPU only, with a dx");
  run(*gpu_->backward_data, resources_.ctx.main_stream());
}

void Conv2d::backward_filter() {
  if (!gpu_) throw std::logic_error("Conv2d::backward_filter: GPU only");
  run(*gpu_->backward_filter, resources_.ctx.main_stream());
}

void Conv2d::forward(cudaStream_t stream) {
  if (!gpu_) {
    conv2d_forward_cpu(x_.value.as<float>(), weight.value.as<float>(), shape_, y.value.as<float>());
    return;
  }
  run(*gpu_->forward, stream);
}

// dW runs on the side stream while dX runs on the main one (Note [Side stream]). The side stream is
// joined before backward returns, so the gradient is final once the main stream's work so far is,
// and no later layer can write over the dy that dW reads (activation gradients share memory). The
// stem, with no dX, computes dW on the main stream. dW goes where SGD reads it, into the fp32
// gradient or a copy in the activation dtype (for bf16 and the padded stem).
void Conv2d::backward() {
  const bool has_dx = !x_.grad.shape.empty();
  if (!gpu_) {
    conv2d_backward_filter_cpu(x_.value.as<float>(), y.grad.as<float>(), shape_, 0.0f, weight.grad.as<float>());
    if (has_dx)
      conv2d_backward_data_cpu(y.grad.as<float>(), weight.value.as<float>(), shape_, dx_beta_, x_.grad.as<float>());
    return;
  }
  Context& ctx = resources_.ctx;
  if (has_dx) {
    ctx.fork();
    run(*gpu_->backward_filter, ctx.side_stream());
    run(*gpu_->backward_data, ctx.main_stream());
    ctx.join();
  } else {
    run(*gpu_->backward_filter, ctx.main_stream());
  }
}

}  // namespace cutrain
