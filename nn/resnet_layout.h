// resnet_layout.h: ResNet-18 (torchvision's resnet18: BasicBlock x [2,2,2,2], widths w, 2w, 4w, 8w
// with w = 64 by default), stated once, as a table of its layers. ResNet18 (nn/resnet.h) builds its
// layers from the table, `bench-step --layers` times them one by one (app/bench/layer_bench.h), and
// the table's FLOPs summed are the step's FLOPs. There are two stems:
//   cifar:    conv1 3x3 stride 1, no max-pool          (11,173,962 parameters at 10 classes)
//   imagenet: conv1 7x7 stride 2 + max-pool 3x3/2      (11,689,512 at 1000 classes, torchvision's)
//
// Note [ResNet-18's layer table]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The table lists the layers in the order they are built: the stem (conv1, bn1, the imagenet
// stem's maxpool), then each block's downsample (downsample.0, downsample.1) when it has one,
// conv1, bn1, conv2 and bn2, which adds the shortcut before its ReLU; then avgpool, fc and the
// loss. Each layer registers its parameters as it is built, and the flat parameter buffer is laid
// out in the reverse order (nn/parameters.h), which is the order backward runs the table in. So
// after backward has run the layers from the last down to any one of them, their gradients fill a
// prefix of the flat gradient buffer, which is what lets DDP's buckets go out during backward.
//
// With --fusion on (the GPU only) each block's bn1 and conv2 are one entry of their own kind,
// bn_relu_conv (Note [The fused unit bn-relu-conv] in nn/bn_relu_conv.h), named after the batch
// norm, with the convolution's name beside it. It registers bn1's parameters and then conv2's, as
// the two entries did, so the parameters, their order and the flat layout are the same; its
// gradients become final together, once its backward has run.
//
// Forward runs the table in its order too, with one change (forward_order): a block's downsample
// runs beside the block's main path. Its convolution is marked `beside`: it runs on the side stream,
// at the start of the block, while the main stream runs conv1, bn1 and conv2 (Note [Side stream] in
// nn/context.h). Its batch norm runs after conv2, on the main stream, once that has joined the side
// stream, and right before bn2, which adds its output.
//
// FLOPs count each multiply and each add of a product. A convolution's forward is
// 2*N*P*Q*K*R*S*C, and its backward twice that (the data gradient and the filter gradient; the
// stem has no data gradient, since the image needs none). The stem counts its 3 image channels,
// not the 8 the GPU pads them to, so the plan's convolution FLOPs are a little higher. The
// classifier's forward is 2*N*I*O and its backward twice that. Batch norm, pooling, the loss and
// SGD count none: they are bound by memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace cutrain
