// bn_relu_conv.h: the fused unit bn-relu-conv of ResNet-18's basic block under --fusion on: the
// block's bn1 with its ReLU, then conv2, as one entry of the layer table (Note [ResNet-18's layer
// table]). It builds the two layers as the unfused table does, in the same order, so they register
// the same parameters and buffers in the same order, and the checkpoint and the flat layout are
// the unfused model's.
//
// Note [The fused unit bn-relu-conv]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Unfused, bn1 reads conv1's output y1 and writes a1 = relu(bn(y1)) and a mask, and conv2 reads a1.
// Fused, on the GPU in training:
//   forward:  bn1's statistics alone (BatchNorm2d::forward_statistics: the unfused forward's
//             statistics, bit for bit, and scale = gamma*invstd, shift = beta - mean*scale), then
//             conv2 as one cuDNN graph whose prologue computes a1 = relu(y1*scale + shift) as it
//             reads y1 (nn/conv_graph.h). Neither a1 nor the mask is written.
//   backward: conv2's backward-data (dy2 -> da1); bn1's backward with the mask recomputed from y1,
//             scale and shift, which also writes a1 (BatchNorm2d::backward_recompute); then
//             conv2's backward-filter, which reads that a1. conv2's filter gradient is therefore
//             final only after bn1's backward, and the unit's gradients all become final together.
//             The backward-filter runs on the main stream: unfused it runs on the side stream beside
//             the backward-data (Note [Side stream]), but here it needs the a1 that bn1's backward
//             writes last, so nothing of the unit is left to run beside it.
// bn1's backward writes dy1 while conv2's backward-filter has yet to read dy2, so the unit keeps
// the two gradients apart in memory (MemoryPlan::reads). Evaluation runs unfused, with the running
// statistics.
// The numerics are those of kernels/batchnorm.h (Note [Batch norm before a fused convolution]):
// the statistics are the unfused Welford pass's, so nothing cancels, and only a1 and the mask may
// differ from the unfused ones, by the rounding of y1*scale + shift against (y1 - mean)*scale + beta.
//
// The unit runs unfused for good, with one line naming it and the reason, when cuDNN declines the
// fused graph or offers no usable engine for it (ConvGraph and try_conv_plan), or when its plan
// fails to run in a trial run once the model's memory exists, before any step (bind()); a failing
// engine is first replaced as Note [Engine fallback] says. It runs unfused, without a line, under
// --batchnorm cudnn, whose batch norm has no statistics-only form (the model says so once), and
// under SyncBatchNorm, whose statistics need all-reduces between stages. Unfused, it runs exactly
// the unfused table's launches in the same order, so its results are --fusion off's, bit for bit.
#pragma once

#include <memory>
#include <string>

#include "nn/batchnorm2d.h"
#include "nn/conv2d.h"
#include "nn/model_resources.h"

namespace cutrain {

class BnReluConv {
 public:
  // bn1 (`bn_name`) reads x; conv2 (`conv_name`) has the given filter, stride and padding, and
  // reads bn1's output. GPU only: it plans the fused forward.
  BnReluConv(ModelResources& resources, const std::string& bn_name, const std::string& conv_name, Activation& x,
             int out_channels, int kernel, int stride, int pad);
  ~BnReluConv();

  // After the model's memory is allocated and before the first forward: binds the convolution and
  // tries the fused plan once (see the note above).
  void bind();
  void forward(bool train, cudaStream_t stream);
  void backward();

  // Whether the training step runs fused (nothing has made it fall back).
  bool fused() const;

  std::unique_ptr<BatchNorm2d> batchnorm;
  std::unique_ptr<Conv2d> conv;

 private:
  void fall_back(const std::string& why);

  std::string name_;
  ModelResources& resources_;
  Tensor& scale_;  // fp32 [C], written by bn1's statistics, read by conv2's prologue and bn1's backward
  Tensor& shift_;
  bool fused_ = false;
};

}  // namespace cutrain
