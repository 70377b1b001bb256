// cross_entropy_loss.h: softmax cross-entropy of the logits against integer labels, mean over
// the batch, with optional label smoothing (kernels/cross_entropy.h has the math). One pass
// writes the loss, the logits' gradient and the count of correct rows; on the GPU both scalars
// stay in device memory so the step never waits on the host.
#pragma once

#include "nn/model_resources.h"

namespace cutrain {

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
