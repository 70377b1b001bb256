// resnet.h: ResNet-18 (torchvision's resnet18: BasicBlock x [2,2,2,2], widths w, 2w, 4w, 8w with
// w = 64 by default) on NHWC activations, with two stems:
//   cifar:    conv1 3x3 stride 1, no max-pool          (11,173,962 parameters at 10 classes)
//   imagenet: conv1 7x7 stride 2 + max-pool 3x3/2      (11,689,512 at 1000 classes, torchvision's)
//
// The model owns its memory for one batch size. That is the input [B,H,W,Cin] in the activation
// dtype on its device, where Cin = input_channels() is 3 on the CPU and 8 on the GPU (the extra
// channels are zero); the labels [B] int32, which the loader fills; every activation and
// gradient; and the flat parameter and gradient buffers.
//
// forward(true) computes the logits, the loss, the count of correct rows and the logits'
// gradient. backward() then writes every gradient, and calls on_grads_ready each time a longer
// prefix of the flat gradients is final. Neither allocates or waits on the host. The training
// step built on them, with the optimizer and the all-reduce, is Note [The step] in
// app/train_step.h. forward(false) evaluates with batch norm's running statistics and leaves only
// the logits, which kernels/cross_entropy.h's count_correct counts.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/basic_block.h"
#include "nn/cross_entropy_loss.h"
#include "nn/linear.h"
#include "nn/pooling.h"

namespace cutrain {

enum class Stem { cifar, imagenet };
Stem parse_stem(const std::string& name);  // "cifar" / "imagenet", else throws naming the value
const char* stem_name(Stem stem);

// The widest model and the most classes cutrain builds: what a flag or a checkpoint may ask for.
inline constexpr int kMaxResNetWidth = 1024;
inline constexpr int kMaxResNetClasses = 100000;

struct ResNetConfig {
  Stem stem = Stem::cifar;
  int num_classes = 10;
  int width = 64;        // base width: channels of conv1 and layer1
  int batch_size = 32;
  int image_size = 32;   // square H = W of the input
  float label_smoothing = 0;
  uint64_t seed = 0;     // initial weights
};

class ResNet18 {
 public:
  ResNet18(Context& ctx, const ResNetConfig& config);
  ~ResNet18();
  ResNet18(const ResNet18&) = delete;
  ResNet18& operator=(const ResNet18&) = delete;

  const ResNetConfig& config() const { return config_; }
  Context& context() const { return resources_.ctx; }

  // What the loader fills.
  int input_channels() const;
  const Tensor& input() const;   // [B, H, W, input_channels()], activation dtype
  const Tensor& labels() const;  // [B] int32

  // `collectives` says whether SyncBatchNorm all-reduces. A model without SyncBatchNorm issues no
  // collectives either way.
  void forward(bool train, Collectives collectives = Collectives::with);
  void backward(std::function<void(int64_t ready_end)> on_grads_ready = {},
                Collectives collectives = Collectives::with);

  const Tensor& logits() const;   // [B, num_classes] fp32
  const float* loss() const;      // training forward: mean loss (device memory on the GPU)
  const int32_t* correct() const; // training forward: rows whose argmax is the label

  // The parameters, in flat fp32 buffers laid out in backward order (params().in_layout_order()).
  int64_t num_parameters() const { return resources_.params.parameter_count(); }
  ParameterSet& params() { return resources_.params; }
  const ParameterSet& params() const { return resources_.params; }
  // Batch norm buffers: "bn1.running_mean", "bn1.running_var" (fp32 [C]). Every BN's
  // num_batches_tracked is this one counter, which checkpoints save and load. PyTorch's training
  // forward increments it; here the trainer does, once per step, because a step replayed from a
  // CUDA graph runs no host code.
  const std::deque<BufferEntry>& buffers() const { return resources_.params.buffers(); }
  int64_t num_batches_tracked = 0;

  // On the GPU, refreshes the copies of the weights that forward reads (the bf16 weights and the
  // stem's padded filter), after something other than SGD changed the fp32 weights.
  void sync_weight_copies();
  // On the GPU, copies every gradient that backward left elsewhere (in bf16, or in the padded
  // stem's layout) into the fp32 gradient buffer, params().grads(), so that the host can read
  // them outside a step.
  void gather_grads();
  void set_sync_batchnorm(SyncBatchNorm sync) { resources_.sync_batchnorm = std::move(sync); }
  size_t planned_bytes() const { return resources_.plan.bytes(); }

 private:
  ResNetConfig config_;
  ModelResources resources_;
  Activation& input_;
  std::unique_ptr<Conv2d> conv1_;
  std::unique_ptr<BatchNorm2d> bn1_;
  std::unique_ptr<MaxPool2d> maxpool_;  // imagenet stem only
  std::vector<std::unique_ptr<BasicBlock>> blocks_;
  std::unique_ptr<GlobalAvgPool2d> avgpool_;
  std::unique_ptr<Linear> fc_;
  std::unique_ptr<CrossEntropyLoss> loss_;
};

}  // namespace cutrain
