#include "nn/cross_entropy_loss.h"

#include "kernels/cross_entropy.h"

namespace cutrain {

CrossEntropyLoss::CrossEntropyLoss(ModelResources& resources, Activation& logits, float label_smoothing)
    : labels(resources.plan.tensor(DType::i32, {logits.value.dim(0)})),
      loss(resources.plan.tensor(DType::f32, {1})),
      correct(resources.plan.tensor(DType::i32, {1})),
      resources_(resources),
      logits_(logits),
      label_smoothing_(label_smoothing) {
  resources.plan.reads(logits);  // in forward: see nn/memory_plan.h
}

void CrossEntropyLoss::forward() {
  const int N = int(logits_.value.dim(0)), K = int(logits_.value.dim(1));
  if (!resources_.ctx.on_gpu()) {
    softmax_cross_entropy_cpu(logits_.value.as<float>(), labels.as<int32_t>(), N, K, label_smoothing_,
                              loss.as<float>(), logits_.grad.as<float>(), correct.as<int32_t>());
  } else {
    softmax_cross_entropy_cuda(logits_.value.as<float>(), labels.as<int32_t>(), N, K, label_smoothing_,
                               loss.as<float>(), logits_.grad.as<float>(), correct.as<int32_t>(),
                               resources_.ctx.main_stream());
  }
}

}  // namespace cutrain
