#include "nn/parameters.h"

#include <algorithm>
#include <stdexcept>

#include <cuda_bf16.h>

#include "kernels/copy_rows.h"

namespace cutrain {

Parameter& ParameterSet::add(std::string name, std::vector<int64_t> shape, bool ohwi, Init init, float init_scale) {
  if (!layout_.empty()) throw std::logic_error("ParameterSet::add after allocate(): " + name);
  Parameter& p = params_.emplace_back();
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.ohwi = ohwi;
  p.init = init;
  p.init_scale = init_scale;
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= d;
  return p;
}

BufferEntry& ParameterSet::add_buffer(std::string name, int64_t numel, float initial) {
  if (!layout_.empty()) throw std::logic_error("ParameterSet::add_buffer after allocate(): " + name);
  BufferEntry& b = buffers_.emplace_back();
  b.name = std::move(name);
  b.numel = numel;
  b.initial = initial;
  return b;
}

namespace {

// torchvision's initialisation of one parameter, drawn in registration (forward) order.
void initialize(const Parameter& p, std::mt19937_64& rng, float* out) {
  switch (p.init) {
    case Init::normal: {
      std::normal_distribution<float> dist(0.0f, p.init_scale);
      for (int64_t i = 0; i < p.numel; ++i) out[i] = dist(rng);
      break;
    }
    case Init::uniform: {
      std::uniform_real_distribution<float> dist(-p.init_scale, p.init_scale);
      for (int64_t i = 0; i < p.numel; ++i) out[i] = dist(rng);
      break;
    }
    case Init::ones: std::fill(out, out + p.numel, 1.0f); break;
    case Init::zeros: std::fill(out, out + p.numel, 0.0f); break;
  }
}

}  // namespace

void ParameterSet::allocate(Device device, DType dtype, uint64_t seed) {
  if (!layout_.empty()) throw std::logic_error("ParameterSet::allocate called twice");
  device_ = device;
  dtype_ = dtype;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    it->offset = numel_;
    it->padded_numel = (it->numel + kAlignElements - 1) / kAlignElements * kAlignElements;
    numel_ += it->padded_numel;
    layout_.push_back(&*it);
  }
  for (BufferEntry& b : buffers_) {
    b.offset = buffer_numel_;
    buffer_numel_ += b.numel;
  }

  values_ = DeviceBuffer(device, numel_ * sizeof(float));
  grads_ = DeviceBuffer(device, numel_ * sizeof(float));
  if (dtype == DType::bf16) values_bf16_ = DeviceBuffer(device, numel_ * dtype_size(DType::bf16));
  buffer_values_ = DeviceBuffer(device, buffer_numel_ * sizeof(float));
  for (Parameter& p : params_) {
    p.value = Tensor(values().as<float>() + p.offset, DType::f32, device, {p.numel});
    p.grad = Tensor(grads().as<float>() + p.offset, DType::f32, device, {p.numel});
    if (dtype == DType::bf16) {
      p.value_bf16 = Tensor(static_cast<uint16_t*>(values_bf16_.data()) + p.offset, DType::bf16, device, {p.numel});
    }
  }
  for (BufferEntry& b : buffers_) {
    b.value = Tensor(buffer_values().as<float>() + b.offset, DType::f32, device, {b.numel});
  }

  // The parameters are initialised on the host, in forward order, and then copied, so that the
  // same seed gives the same model on every device and rank.
  std::mt19937_64 rng(seed);
  std::vector<float> host(numel_);
  for (const Parameter& p : params_) initialize(p, rng, host.data() + p.offset);
  copy_from_host(host.data(), values());
  std::vector<float> host_buffers(buffer_numel_);
  for (const BufferEntry& b : buffers_) {
    std::fill_n(host_buffers.data() + b.offset, b.numel, b.initial);
  }
  copy_from_host(host_buffers.data(), buffer_values());
  if (device == Device::cuda) plan_device_copies();
}

namespace {

// The copy of `p` between the fp32 flat buffer (`flat`) and a layer's copy (`copy`), as rows of
// its layer_cols in layer_pitch (one row when contiguous); `to_copy` says which way.
RowsCopy rows_copy(const Parameter& p, const void* flat, const void* copy, bool to_copy) {
  const int64_t cols = p.layer_cols ? p.layer_cols : p.numel;
  const int64_t pitch = p.layer_cols ? p.layer_pitch : p.numel;
  RowsCopy c;
  c.rows = p.numel / cols;
  c.cols = cols;
  c.in = to_copy ? flat : copy;
  c.out = const_cast<void*>(to_copy ? copy : flat);
  c.in_pitch = to_copy ? cols : pitch;
  c.out_pitch = to_copy ? pitch : cols;
  return c;
}

}  // namespace

void ParameterSet::plan_device_copies() {
  for (const Parameter* p : layout_) {
    const void* value_copy =
        p->layer_value ? p->layer_value->data : (dtype_ == DType::bf16 ? p->value_bf16.data : nullptr);
    if (value_copy) weight_copies_.push_back(rows_copy(*p, p->value.data, value_copy, /*to_copy=*/true));
    if (p->layer_grad) {
      grad_gathers_.push_back(rows_copy(*p, p->grad.data, p->layer_grad->data, /*to_copy=*/false));
      grad_gather_offsets_.push_back(p->offset);
    }
  }
  device_weight_copies_ = device_table(Device::cuda, weight_copies_);
  device_grad_gathers_ = device_table(Device::cuda, grad_gathers_);
}

int64_t ParameterSet::parameter_count() const {
  int64_t count = 0;
  for (const Parameter& p : params_) count += p.numel;
  return count;
}

Tensor ParameterSet::values() const { return Tensor(values_.data(), DType::f32, device(), {numel_}); }
Tensor ParameterSet::grads() const { return Tensor(grads_.data(), DType::f32, device(), {numel_}); }
Tensor ParameterSet::buffer_values() const {
  return Tensor(buffer_values_.data(), DType::f32, device(), {buffer_numel_});
}

// Every copy has the activation dtype, so the copies are bf16 in bf16 mode and the padded stem's
// filter is fp32 in fp32 mode.
void ParameterSet::sync_weight_copies(cudaStream_t stream) const {
  const auto* copies = static_cast<const RowsCopy*>(device_weight_copies_.data());
  if (dtype_ == DType::bf16) {
    copy_rows_cuda<float, __nv_bfloat16>(weight_copies_.data(), copies, int(weight_copies_.size()), stream);
  } else {
    copy_rows_cuda<float, float>(weight_copies_.data(), copies, int(weight_copies_.size()), stream);
  }
}

void ParameterSet::gather_grads(int64_t begin, int64_t end, cudaStream_t stream) const {
  const auto& offsets = grad_gather_offsets_;
  const size_t first = size_t(std::lower_bound(offsets.begin(), offsets.end(), begin) - offsets.begin());
  const size_t last = size_t(std::lower_bound(offsets.begin(), offsets.end(), end) - offsets.begin());
  if (first == last) return;
  const RowsCopy* host = grad_gathers_.data() + first;
  const RowsCopy* device = static_cast<const RowsCopy*>(device_grad_gathers_.data()) + first;
  if (dtype_ == DType::bf16) {
    copy_rows_cuda<__nv_bfloat16, float>(host, device, int(last - first), stream);
  } else {
    copy_rows_cuda<float, float>(host, device, int(last - first), stream);
  }
}

}  // namespace cutrain
