// resnet.h: ResNet-18 (torchvision's resnet18: BasicBlock x [2,2,2,2], widths w, 2w, 4w, 8w with
// w = 64 by default), stated once as a table of its layers, and the model built from that table, on
// NHWC activations (Note [ResNet-18's layer table] in nn/resnet.cpp). `bench-step --layers` times
// the table's layers one by one (app/bench/layer_bench.h), and the table's FLOPs summed are the
// step's FLOPs. There are two stems:
//   cifar:    conv1 3x3 stride 1, no max-pool          (11,173,962 parameters at 10 classes)
//   imagenet: conv1 7x7 stride 2 + max-pool 3x3/2      (11,689,512 at 1000 classes, torchvision's)
//
// The model owns its memory for one batch size. That is the input [B,H,W,Cin] in the activation
// dtype on its device, where Cin = input_channels() is 3 on the CPU and 8 on the GPU (the extra
// channels are zero); the labels [B] int32, which the loader fills; every activation and
// gradient; and the flat parameter and gradient buffers.
//
// forward(true) computes the logits, the loss, the count of correct rows and the logits'
// gradient. backward_layer(i), called for each layer from the last to the first, then writes the
// gradients, and after it the gradients [0, grads_final_end(i)) of the flat buffer are final.
// Neither allocates or waits on the host. The training step walks the layers itself, so that it
// can all-reduce and update each bucket of gradients as soon as it is final: Note [The step] in
// app/train_step.cpp. forward(false) evaluates with batch norm's running statistics and leaves only
// the logits, which kernels/cross_entropy.h's count_correct counts.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "nn/batchnorm2d.h"
#include "nn/bn_relu_conv.h"
#include "nn/conv2d.h"
#include "nn/pooling_linear_loss.h"

namespace cutrain {

enum class Stem { cifar, imagenet };
Stem parse_stem(const std::string& name);  // "cifar" / "imagenet", else throws naming the value
const char* stem_name(Stem stem);

inline constexpr int kImageChannels = 3;  // red, green and blue

// The widest model and the most classes cutrain builds: what a flag or a checkpoint may ask for.
inline constexpr int kMaxResNetWidth = 1024;
inline constexpr int kMaxResNetClasses = 100000;

struct ResNetConfig {
  Stem stem = Stem::cifar;
  int num_classes = 10;
  int width = 64;  // base width: channels of conv1 and layer1
  int batch_size = 32;
  int image_size = 32;  // square H = W of the input
  float label_smoothing = 0;
  uint64_t seed = 0;  // initial weights
};

enum class LayerKind { conv, batchnorm, bn_relu_conv, maxpool, avgpool, linear, loss };

struct LayerSpec {
  std::string name;  // torchvision's: "conv1", "layer2.0.downsample.0"; "maxpool", "avgpool", "loss"
  std::string conv_name;  // bn_relu_conv: its convolution's ("layer1.0.conv2"); `name` is its batch norm's
  LayerKind kind = LayerKind::conv;
  int input = -1;                       // the index of the layer whose output this one reads; -1: the image
  int residual = -1;                    // batch norm: the layer whose output it adds before the ReLU; -1: none
  bool relu = false;                    // batch norm (and bn_relu_conv): fused with the ReLU
  int in_channels = 0;                  // a convolution's (and bn_relu_conv's): the image's 3 for the stem
  int kernel = 0, stride = 1, pad = 0;  // a convolution's (and bn_relu_conv's), and the max-pool's
  // A convolution's backward adds its data gradient to its input's gradient (beta 1) rather than
  // writing it, because a later layer reads the same input, and backward ran that layer first.
  bool adds_input_grad = false;
  bool beside = false;      // forward runs it on the side stream (Note [ResNet-18's layer table])
  std::vector<int> output;  // its output's shape: [N,H,W,C] NHWC, [N,C] after the pool, [1] the loss
  double forward_flops = 0;
  double backward_flops = 0;
};

struct ResNetLayout {
  std::vector<LayerSpec> layers;   // in the order they are built; backward runs it in reverse
  std::vector<int> forward_order;  // the order forward runs them (Note [ResNet-18's layer table])
};

// With `fused`, the table of --fusion on (the note above); the GPU's only.
ResNetLayout resnet18_layout(const ResNetConfig& config, bool fused = false);

// The model's FLOPs in one training step: the sum over the table of forward and backward.
double step_flops(const ResNetConfig& config);

// "conv 3x3/2", "bn+add+relu", "bn+relu+conv 3x3/1", "maxpool 3x3/2", ...: what the layer computes,
// in a few characters.
std::string describe(const LayerSpec& layer);
// "256x32x32x64": its output's shape.
std::string shape_text(const std::vector<int>& shape);

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

  // The layer table, in the order the layers were built (Note [ResNet-18's layer table]): with
  // ContextOptions::fusion on the GPU, the table of --fusion on.
  const std::vector<LayerSpec>& layers() const { return layout_.layers; }
  // How many fused units run fused (Note [The fused unit bn-relu-conv]), which the banner says; 0
  // without --fusion on.
  int fused_units() const;

  // Every layer in forward's order, on the main stream and, for the downsamples, the side stream.
  void forward(bool train);
  // One layer's backward. Backward runs the layers from the last to the first.
  void backward_layer(int layer);
  // Once backward_layer has run for every layer from the last down to `layer`, the flat gradients
  // [0, grads_final_end(layer)) are final, and backward reads those parameters no more, so an
  // optimizer may update them. On the GPU, final means final once the work enqueued so far on the
  // main stream has run (Note [Side stream]).
  int64_t grads_final_end(int layer) const { return built_[size_t(layer)].grads_final_end; }
  // Every layer's backward, from the last to the first.
  void backward();
  // One layer's forward alone, on the main stream: what `bench-step --layers` times, in table order.
  void forward_layer(int layer, bool train);

  const Tensor& logits() const;    // [B, num_classes] fp32
  const float* loss() const;       // training forward: mean loss (device memory on the GPU)
  const int32_t* correct() const;  // training forward: rows whose argmax is the label

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
  void set_sync_batchnorm(SyncBatchNorm sync);
  size_t planned_bytes() const { return resources_.plan.bytes(); }

 private:
  // One layer of the table, built: the nn/ layer of its kind (the others null).
  struct Layer {
    std::unique_ptr<Conv2d> conv;
    std::unique_ptr<BatchNorm2d> batchnorm;
    std::unique_ptr<BnReluConv> bn_relu_conv;
    std::unique_ptr<MaxPool2d> maxpool;
    std::unique_ptr<GlobalAvgPool2d> avgpool;
    std::unique_ptr<Linear> linear;
    std::unique_ptr<CrossEntropyLoss> loss;
    std::vector<const Parameter*> parameters;  // the ones it registered
    int64_t grads_final_end = 0;
  };
  void forward_layer(int layer, bool train, cudaStream_t stream);

  ResNetConfig config_;
  ResNetLayout layout_;
  ModelResources resources_;
  Activation& input_;
  std::vector<Layer> built_;  // by table index
};

}  // namespace cutrain
