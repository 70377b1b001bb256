// resnet_layers.h: ResNet-18 (nn/resnet.h) as a list of its layers, in the order the model builds
// them, each with what it reads, the shape of what it writes and the FLOPs of its products. The
// list is what `bench-step --layers` builds and times one layer at a time (app/bench/layer_bench.h), and
// its FLOPs summed are what `bench-step --matrix` counts as the step's.
//
// The order is ResNet18's: the stem (conv1, bn1, the imagenet stem's maxpool), then each block's
// downsample (downsample.0, downsample.1) when it has one, conv1, bn1, conv2 and bn2, which adds
// the shortcut before its ReLU; then avgpool, fc and the loss. Backward visits them in reverse.
//
// FLOPs count each multiply and each add of a product. A convolution's forward is
// 2*N*P*Q*K*R*S*C, and its backward twice that (the data gradient and the filter gradient; the
// stem has no data gradient, since the image needs none). The stem counts its 3 image channels,
// not the 8 the GPU pads them to, so the plan's convolution FLOPs are a little higher. The
// classifier's forward is 2*N*I*O and its backward twice that. Batch norm, pooling, the loss and
// SGD count none: they are bound by memory.
#pragma once

#include <string>
#include <vector>

#include "nn/resnet.h"

namespace cutrain {

enum class LayerKind { conv, batchnorm, maxpool, avgpool, linear, loss };

struct LayerSpec {
  std::string name;          // torchvision's: "conv1", "layer2.0.downsample.0"; "maxpool", "avgpool", "loss"
  LayerKind kind = LayerKind::conv;
  int input = -1;            // the index of the layer whose output this one reads; -1: the image
  int residual = -1;         // batch norm: the layer whose output it adds before the ReLU; -1: none
  bool relu = false;         // batch norm: fused with the ReLU
  int in_channels = 0;       // a convolution's: the image's 3 for the stem
  int kernel = 0, stride = 1, pad = 0;  // a convolution's, and the max-pool's
  std::vector<int> output;   // its output's shape: [N,H,W,C] NHWC, [N,C] after the pool, [1] the loss
  double forward_flops = 0;
  double backward_flops = 0;
};

std::vector<LayerSpec> resnet18_layers(const ResNetConfig& config);

// The model's FLOPs in one training step: the sum over resnet18_layers of forward and backward.
double step_flops(const ResNetConfig& config);

// "conv 3x3/2", "bn+add+relu", "maxpool 3x3/2", ...: what the layer computes, in a few characters.
std::string describe(const LayerSpec& layer);
// "256x32x32x64": its output's shape.
std::string shape_text(const std::vector<int>& shape);

}  // namespace cutrain
