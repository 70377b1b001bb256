// pooling.h: the two poolings of ResNet-18 as layers over NHWC activations (kernels/pooling.h
// has the math): MaxPool2d 3x3 stride 2 padding 1 after the imagenet stem, and the global
// average pool before the classifier, [N,H,W,C] -> [N,C]. Both write dx with =.
#pragma once

#include "nn/model_resources.h"

namespace cutrain {

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

}  // namespace cutrain
