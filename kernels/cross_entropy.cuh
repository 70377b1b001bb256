// cross_entropy.cuh: the per-row and per-element math of softmax cross-entropy, shared by the CPU
// reference (cross_entropy.cpp) and the CUDA kernels (cross_entropy.cu). A row is reduced to its
// maximum, sum of exp(l - max) and sum of logits; everything else follows from those three.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace cutrain {

// A label the loss can use: a class index in [0, K).
__host__ __device__ inline bool ce_label_valid(int label, int K) { return label >= 0 && label < K; }

// The smoothed target of class k: (1 - eps)*[k == label] + eps/K.
__host__ __device__ inline float ce_target(int k, int label, float eps, int K) {
  return (k == label ? 1.0f - eps : 0.0f) + eps / float(K);
}

// -sum_k target_k * log p_k = logsumexp(l) - (1 - eps)*l[label] - (eps/K)*sum_k l_k,
// with logsumexp(l) = max + log(sum_k exp(l_k - max)).
__host__ __device__ inline float ce_row_loss(float max, float sum_exp, float logit_label, float sum_logits, float eps,
                                             int K) {
  return max + logf(sum_exp) - (1.0f - eps) * logit_label - eps / float(K) * sum_logits;
}

// dlogits[n,k] = (p_k - target_k) / N, with p_k = exp(l_k - max) / sum_exp.
__host__ __device__ inline float ce_grad(float logit, float max, float sum_exp, float target, int N) {
  return (expf(logit - max) / sum_exp - target) / float(N);
}

// Argmax order: a larger value wins, a tie goes to the lower class index (as torch.argmax).
__host__ __device__ inline bool argmax_prefers(float value, int k, float best_value, int best_k) {
  return value > best_value || (value == best_value && k < best_k);
}

}  // namespace cutrain
