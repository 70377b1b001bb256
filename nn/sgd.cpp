#include "nn/sgd.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "nn/context.h"

namespace cutrain {

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A layer's copy of p, in the activation dtype and laid out as the layer says.
SgdArray device_array(const Parameter& p, const Tensor& t) {
  return {t.data, t.dtype == DType::bf16, p.layer_cols, p.layer_pitch};
}

// Parameter p's segment, with its gradient where `grads` says and the copy that forward reads.
SgdSegment segment_of(const Parameter& p, DType dtype, SGD::Grads grads) {
  SgdSegment s;
  s.offset = p.offset;
  s.numel = p.numel;
  s.norm = p.norm;
  s.grad = {p.grad.data};
  if (grads == SGD::Grads::as_written && p.layer_grad) s.grad = device_array(p, *p.layer_grad);
  if (p.layer_value) {
    s.copy = device_array(p, *p.layer_value);
  } else if (dtype == DType::bf16) {
    s.copy = {p.value_bf16.data, true};
  }
  s.packed = s.grad.cols == 0 && s.copy.cols == 0 && aligned16(p.value.data) && aligned16(s.grad.data) &&
             aligned16(s.copy.data);
  return s;
}

}  // namespace

SGD::SGD(Context& ctx, ParameterSet& params, SgdConfig config, LrSchedule schedule, Grads grads)
    : ctx_(ctx),
      params_(params),
      config_(config),
      schedule_(schedule),
      momentum_(ctx.device(), params.numel() * sizeof(float)),
      step_(ctx.device(), sizeof(int64_t)),
      lr_(ctx.device(), sizeof(float)),
      grad_squares_(ctx.device(), sizeof(double)),
      clip_factor_(ctx.device(), sizeof(float)) {
  for (const Parameter* p : params.in_layout_order()) segments_.push_back(segment_of(*p, ctx.dtype(), grads));
  device_segments_ = device_table(ctx.device(), segments_);
}

Tensor SGD::momentum() const { return Tensor(momentum_.data(), DType::f32, ctx_.device(), {params_.numel()}); }

void SGD::set_step(int64_t step) { copy_bytes_from_host(&step, step_); }

int64_t SGD::step_count() const {
  int64_t step = 0;
  copy_bytes_to_host(step_, &step);
  return step;
}

void SGD::begin_step(cudaStream_t stream) {
  clipped_ = false;
  auto* step = static_cast<int64_t*>(step_.data());
  auto* lr = static_cast<float*>(lr_.data());
  if (ctx_.on_gpu()) {
    lr_schedule_step_cuda(schedule_, step, lr, stream);
  } else {
    lr_schedule_step_cpu(schedule_, step, lr);
  }
}

// The parameters that start in [begin, end) are a run of segments, in layout order.
void SGD::update(int64_t begin, int64_t end, cudaStream_t stream) {
  const auto starts_before = [](const SgdSegment& s, int64_t offset) { return s.offset < offset; };
  const size_t first =
      size_t(std::lower_bound(segments_.begin(), segments_.end(), begin, starts_before) - segments_.begin());
  const size_t last =
      size_t(std::lower_bound(segments_.begin(), segments_.end(), end, starts_before) - segments_.begin());
  if (first == last) return;
  float* param = params_.values().as<float>();
  auto* buf = static_cast<float*>(momentum_.data());
  const auto* lr = static_cast<const float*>(lr_.data());
  const float* scale = clipped_ ? static_cast<const float*>(clip_factor_.data()) : nullptr;
  if (ctx_.on_gpu()) {
    sgd_update_cuda(param, buf, segments_.data() + first,
                    static_cast<const SgdSegment*>(device_segments_.data()) + first, int(last - first), lr, config_,
                    stream, scale);
  } else {
    sgd_update_cpu(param, buf, segments_.data() + first, int(last - first), lr, config_, scale);
  }
}

void SGD::clip_grad_norm(double max_norm, cudaStream_t stream) {
  const SgdClip clip{max_norm, static_cast<float*>(clip_factor_.data())};
  sum_grad_squares(&clip, stream);
  clipped_ = true;
}

double SGD::grad_norm(cudaStream_t stream) {
  // With clipping, clip_grad_norm has summed this step's squares already.
  if (!clipped_) sum_grad_squares(nullptr, stream);
  double squares = cpu_grad_squares_;
  if (ctx_.on_gpu()) copy_bytes_to_host(grad_squares_, &squares);
  return std::sqrt(squares);
}

void SGD::sum_grad_squares(const SgdClip* clip, cudaStream_t stream) {
  if (ctx_.on_gpu()) {
    sgd_grad_squares_cuda(segments_.data(), static_cast<const SgdSegment*>(device_segments_.data()),
                          int(segments_.size()), static_cast<double*>(grad_squares_.data()), stream, clip);
  } else {
    cpu_grad_squares_ = sgd_grad_squares_cpu(segments_.data(), int(segments_.size()), clip);
  }
}

}  // namespace cutrain
