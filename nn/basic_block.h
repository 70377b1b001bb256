// basic_block.h: ResNet's BasicBlock (torchvision's names):
//
//   out = relu( bn2(conv2( relu(bn1(conv1(x))) )) + shortcut(x) )
//   shortcut = identity, or downsample = bn(conv1x1 stride s) when the shape changes
//
// bn1 is fused with its ReLU, and bn2 with the residual add and the final ReLU. Forward runs the
// downsample convolution on the side stream while conv1, bn1 and conv2 run on the main stream,
// and its batch norm on the main stream (Note [Side stream]).
//
// Backward runs in the order in which the flat gradient buffer is laid out: bn2 (which also
// writes the residual's gradient), conv2, bn1, conv1, then downsample.1 and downsample.0. The
// block input's gradient is the sum of two shares. With an identity shortcut, bn2 writes the
// residual share (=) and conv1 adds its own (beta 1). With a downsample, conv1 writes (=) and
// downsample.0 adds. The downsample is registered first so that it lands last in the reversed
// layout.
#pragma once

#include <memory>
#include <string>

#include "nn/batchnorm2d.h"
#include "nn/conv2d.h"

namespace cutrain {

class BasicBlock {
 public:
  // name: "layer2.0"; x: [N,H,W,in_channels]
  BasicBlock(ModelResources& resources, const std::string& name, Activation& x, int out_channels, int stride);

  // `collectives` says whether SyncBatchNorm all-reduces in this step.
  void forward(bool train, Collectives collectives);
  void backward(Collectives collectives);

  Activation& y() { return bn2_->y; }

 private:
  ModelResources& resources_;
  Activation& x_;
  std::unique_ptr<Conv2d> downsample_conv_;     // downsample.0 (null: identity shortcut)
  std::unique_ptr<BatchNorm2d> downsample_bn_;  // downsample.1
  std::unique_ptr<Conv2d> conv1_;
  std::unique_ptr<BatchNorm2d> bn1_;
  std::unique_ptr<Conv2d> conv2_;
  std::unique_ptr<BatchNorm2d> bn2_;
};

}  // namespace cutrain
