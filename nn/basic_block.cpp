#include "nn/basic_block.h"

namespace cutrain {

BasicBlock::BasicBlock(ModelResources& resources, const std::string& name, Activation& x, int out_channels, int stride)
    : resources_(resources), x_(x) {
  const int in_channels = int(x.value.dim(3));
  Activation* shortcut = &x;
  if (stride != 1 || in_channels != out_channels) {
    downsample_conv_ =
        std::make_unique<Conv2d>(resources, name + ".downsample.0", x, in_channels, out_channels, 1, stride, 0);
    downsample_bn_ = std::make_unique<BatchNorm2d>(resources, name + ".downsample.1", downsample_conv_->y, /*relu=*/false);
    shortcut = &downsample_bn_->y;
  }
  conv1_ = std::make_unique<Conv2d>(resources, name + ".conv1", x, in_channels, out_channels, 3, stride, 1);
  bn1_ = std::make_unique<BatchNorm2d>(resources, name + ".bn1", conv1_->y, /*relu=*/true);
  conv2_ = std::make_unique<Conv2d>(resources, name + ".conv2", bn1_->y, out_channels, out_channels, 3, 1, 1);
  bn2_ = std::make_unique<BatchNorm2d>(resources, name + ".bn2", conv2_->y, /*relu=*/true, shortcut);
}

// The downsample convolution reads only x and writes only its own output, so it runs on the side
// stream while conv1, bn1 and conv2 run on the main stream, and is joined before its batch norm
// (see Note [Side stream]). Under SyncBatchNorm it stays on the main stream.
void BasicBlock::forward(bool train, Collectives collectives) {
  Context& ctx = resources_.ctx;
  const bool on_side_stream = downsample_conv_ && !resources_.sync_batchnorm.enabled();
  if (downsample_conv_) {
    if (on_side_stream) ctx.fork();
    downsample_conv_->forward(on_side_stream ? ctx.side_stream() : ctx.main_stream());
  }
  conv1_->forward(ctx.main_stream());
  bn1_->forward(train, collectives);
  conv2_->forward(ctx.main_stream());
  if (downsample_conv_) {
    if (on_side_stream) ctx.join();
    downsample_bn_->forward(train, collectives);
  }
  bn2_->forward(train, collectives);
}

void BasicBlock::backward(Collectives collectives) {
  bn2_->backward(collectives);  // also writes the shortcut's gradient
  conv2_->backward(0.0f);
  bn1_->backward(collectives);
  conv1_->backward(downsample_conv_ ? 0.0f : 1.0f);  // with an identity shortcut, add to its share
  if (downsample_conv_) {
    downsample_bn_->backward(collectives);
    downsample_conv_->backward(1.0f);
  }
}

}  // namespace cutrain
