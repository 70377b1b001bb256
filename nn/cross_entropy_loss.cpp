#include "nn/cross_entropy_loss.h"

#include "kernels/cross_entropy.h"

namespace cutrain {

CrossEntropyLoss::CrossEntropyLoss(ModelResources& model, Activation& logits, float label_smoothing)
    : labels(model.plan.tensor(DType::i32, {logits.value.dim(0)})),
      loss(model.plan.tensor(DType::f32, {1})),
      correct(model.plan.tensor(DType::i32, {1})),
      model_(model),
      logits_(logits),
      label_smoothing_(label_smoothing) {
  model.plan.reads(logits);  // in forward: see nn/memory_plan.h
}

void CrossEntropyLoss::forward() {
  const int N = int(logits_.value.dim(0)), K = int(logits_.value.dim(1));
  if (!model_.ctx.on_gpu()) {
    softmax_cross_entropy_cpu(logits_.value.as<float>(), labels.as<int32_t>(), N, K, label_smoothing_,
                              loss.as<float>(), logits_.grad.as<float>(), correct.as<int32_t>());
  } else {
    softmax_cross_entropy_cuda(logits_.value.as<float>(), labels.as<int32_t>(), N, K, label_smoothing_,
                               loss.as<float>(), logits_.grad.as<float>(), correct.as<int32_t>(),
                               model_.ctx.main_stream());
  }
}

}  // namespace cutrain
