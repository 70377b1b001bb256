// pooling_linear_loss.h: ResNet-18's layers other than convolution and batch norm, in forward
// order. The stem's max pool, then the classifier head: the global average pool, the fully
// connected layer to the logits, and the softmax cross-entropy loss against the labels. Each
// layer's forward and backward sit side by side in pooling_linear_loss.cpp, with their CPU and
// GPU paths.
#pragma once

#include <string>

#include "nn/model_resources.h"

namespace cutrain {

// The two poolings over NHWC activations (kernels/pooling.h has the math): MaxPool2d 3x3 stride 2
// padding 1 after the imagenet stem, and the global average pool before the classifier,
// [N,H,W,C] -> [N,C]. Both write dx with =.
class MaxPool2d {
 public:
  MaxPool2d(ModelResources& resources, Activation& x);
  void forward();
  void backward();
  Activation& y;  // [N, (H+1)/2 rounded as PyTorch, ..., C]

 private:
  ModelResources& resources_;
  Activation& x_;
};

class GlobalAvgPool2d {
 public:
  GlobalAvgPool2d(ModelResources& resources, Activation& x);
  void forward();
  void backward();
  Activation& y;  // [N, C]

 private:
  ModelResources& resources_;
  Activation& x_;
};

// The classifier, PyTorch's nn.Linear:  y[N,O] = x[N,I] W^T + b,  W [O,I].
//   dx = dy W (=),   dW = dy^T x (=),   db = sum_n dy[n] (=)
//
// CPU: kernels/linear_cpu.h. GPU: cuBLAS, fp32 accumulation. The output (the logits) and its
// gradient are fp32 in both precisions; in bf16 mode x and the weight copy are bf16 (GemmEx
// bf16 x bf16 -> fp32), dy is rounded to bf16 for the two backward products, dW lands in fp32.
// The bias is added as a rank-1 product ones[N] b^T before the main product accumulates.
class Linear {
 public:
  Linear(ModelResources& resources, const std::string& name, Activation& x, int out_features);

  void forward();
  void backward();

  Parameter& weight;  // [O, I]
  Parameter& bias;    // [O]
  Activation& y;      // [N, O], fp32

 private:
  void backward_gpu();

  ModelResources& resources_;
  Activation& x_;
  int n_, in_, out_;
  Tensor* ones_ = nullptr;     // GPU: [N] fp32 ones (the bias broadcast and db as products)
  Tensor* dy_bf16_ = nullptr;  // GPU bf16 mode: [N, O] dy rounded to bf16
};

// Softmax cross-entropy of the logits against integer labels, mean over the batch, with optional
// label smoothing (kernels/cross_entropy.h has the math). One pass writes the loss, the logits'
// gradient and the count of correct rows, so the loss has no backward of its own. On the GPU both
// scalars stay in device memory so the step never waits on the host.
class CrossEntropyLoss {
 public:
  CrossEntropyLoss(ModelResources& resources, Activation& logits, float label_smoothing);

  void forward();  // loss, correct, and logits.grad

  Tensor& labels;   // [N] int32, filled by the loader
  Tensor& loss;     // [1] fp32
  Tensor& correct;  // [1] int32

 private:
  ModelResources& resources_;
  Activation& logits_;
  float label_smoothing_;
};

}  // namespace cutrain
