// parameters.h: one flat fp32 buffer each for the parameters and their gradients, and in bf16
// mode a bf16 copy of the parameters that forward reads. Layers register their parameters while
// the model is built, in forward order. allocate() lays them out in reverse order, which is the
// order in which backward completes their gradients (fc first and conv1 last), so that DDP's
// buckets are contiguous spans of the gradient buffer.
//
// Every parameter starts on a 256-byte boundary (kAlignElements floats, and 128 bytes in the bf16
// copy). cuDNN's NHWC tensor-core kernels need 16-byte aligned filters and filter gradients, and
// the 10 floats of fc.bias would otherwise shift every later parameter off that boundary. The few
// elements of padding after a parameter have no gradient, so SGD leaves them at zero.
//
// Each parameter keeps its torchvision name and shape, so conv weights are OIHW. In memory a conv
// weight is OHWI (cuDNN's NHWC filter layout, "KRSC"), and checkpoints convert between the two.
//
// On the GPU a layer may keep its own copies of a parameter where cuDNN wants them. These are the
// weights that forward reads (the bf16 copy in bf16 mode, which is every parameter's by default,
// and the stem's zero-padded filter) and the gradient that backward writes (a bf16 filter
// gradient, and the stem's padded one). SGD reads those gradients and writes those weights
// directly. gather_grads() puts the gradients into the fp32 buffer when something needs them
// there (the all-reduce, or a test), and sync_weight_copies() refreshes the copies after the fp32
// weights change outside SGD.
//
// Gradients are written (=) and never accumulated, so nothing has to zero them between steps.
// Which of them are final during backward is the model's to say (ResNet18::grads_final_end).
//
// Buffers (batch norm's running statistics) live in a second flat fp32 array, which is neither
// reduced nor trained.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/copy_rows.h"
#include "nn/device_buffer.h"
#include "nn/tensor.h"

namespace cutrain {

// How a parameter starts (torchvision's initialisation), with scale computed by its layer.
enum class Init {
  normal,   // N(0, scale^2), Kaiming-normal with fan_out and ReLU gain, so scale = sqrt(2 / fan_out)
  uniform,  // U(-scale, scale): nn.Linear's default, scale = 1 / sqrt(fan_in)
  ones,
  zeros,
};

struct Parameter {
  std::string name;            // torchvision state_dict key, "layer1.0.conv1.weight"
  std::vector<int64_t> shape;  // torchvision shape: conv OIHW, fc [out, in], BN [C]
  bool ohwi = false;           // stored as OHWI (conv weights)
  Init init = Init::zeros;
  float init_scale = 0;
  // A normalization layer's (batch norm's weight or bias), which SGD's norm_weight_decay decays
  // (kernels/sgd.h).
  bool norm = false;
  int64_t offset = 0;  // into the flat buffers, in elements
  int64_t numel = 0;
  int64_t padded_numel = 0;  // numel and the padding after it, so the next offset is offset + padded_numel
  Tensor value;              // fp32 views into the flat buffers (storage layout, OHWI for convs)
  Tensor grad;
  Tensor value_bf16;  // the copy that forward reads, in bf16 mode only

  // The values that the GPU's products read in activation dtype `dtype`, which are the bf16 copy
  // in bf16 mode and the fp32 master otherwise.
  const void* value_in(DType dtype) const { return dtype == DType::bf16 ? value_bf16.data : value.data; }

  // The layer's own copies: on the GPU, the layer sets these before allocation when the weights
  // that forward reads and the gradient that backward writes are not value_in(dtype) and grad (as
  // said above), as a convolution's padded filter is not (nn/conv2d.h). Both hold rows
  // of layer_cols elements, layer_pitch apart, or are contiguous when layer_cols is 0.
  const Tensor* layer_value = nullptr;
  const Tensor* layer_grad = nullptr;
  int64_t layer_cols = 0, layer_pitch = 0;
};

struct BufferEntry {
  std::string name;  // "bn1.running_mean"
  int64_t numel = 0;
  float initial = 0;
  int64_t offset = 0;
  Tensor value;  // fp32 view into the flat buffer array
};

class ParameterSet {
 public:
  ParameterSet() = default;
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;

  // While building (forward order). References stay valid for the life of the set.
  Parameter& add(std::string name, std::vector<int64_t> shape, bool ohwi, Init init, float init_scale);
  BufferEntry& add_buffer(std::string name, int64_t numel, float initial);

  // Lays out, allocates and initialises from `seed` (on the host, so every device starts equal).
  void allocate(Device device, DType dtype, uint64_t seed);

  // In layout order: fc.bias first (offset 0), then fc.weight ... conv1.weight last.
  const std::vector<Parameter*>& in_layout_order() const { return layout_; }
  const std::deque<BufferEntry>& buffers() const { return buffers_; }
  static constexpr int64_t kAlignElements = 64;
  int64_t numel() const { return numel_; }  // of the flat buffers, padding included
  int64_t parameter_count() const;          // the parameters' own elements (torchvision's count)
  Device device() const { return device_; }
  Tensor values() const;  // [numel] fp32
  Tensor grads() const;   // [numel] fp32
  Tensor buffer_values() const;

  // On the GPU, refreshes every copy of the weights that forward reads from the fp32 master, after
  // initialising or loading, in one launch.
  void sync_weight_copies(cudaStream_t stream) const;
  // On the GPU, widens the gradients that backward wrote elsewhere (layer_grad) for the
  // parameters in the flat span [begin, end) into the fp32 gradient buffer. This is one launch, or
  // none when there are no such gradients.
  void gather_grads(int64_t begin, int64_t end, cudaStream_t stream) const;

 private:
  void plan_device_copies();  // the GPU's copy lists of sync_weight_copies() and gather_grads()

  std::deque<Parameter> params_;  // registration (forward) order
  std::vector<Parameter*> layout_;
  std::deque<BufferEntry> buffers_;
  int64_t numel_ = 0;
  int64_t buffer_numel_ = 0;
  Device device_ = Device::cpu;
  DType dtype_ = DType::f32;
  DeviceBuffer values_, grads_, values_bf16_, buffer_values_;
  // The copies of sync_weight_copies() and gather_grads(), in layout order, on the host and on the
  // device, and each gather's parameter offset.
  std::vector<RowsCopy> weight_copies_, grad_gathers_;
  std::vector<int64_t> grad_gather_offsets_;
  DeviceBuffer device_weight_copies_, device_grad_gathers_;
};

}  // namespace cutrain
