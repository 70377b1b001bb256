// cross_entropy.h: softmax cross-entropy over logits[N, K] (fp32) with integer labels, mean over
// the batch, optional label smoothing eps (PyTorch's: target = (1-eps)*onehot + eps/K).
//
//   p = softmax(logits[n]),  loss = -(1/N) sum_n sum_k target[n,k] * log p[n,k]
//   dlogits[n,k] = (p[n,k] - target[n,k]) / N
//
// One pass computes the loss, its gradient and the number of rows whose argmax equals the label.
// On the GPU the loss and the count land in device memory (no host synchronisation); the
// trainer reads them back when it logs.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

// loss: one float (=, not +=); correct: one int (=).
void softmax_cross_entropy_cpu(const float* logits, const int32_t* labels, int N, int K, float label_smoothing,
                               float* loss, float* dlogits, int32_t* correct);
void softmax_cross_entropy_cuda(const float* logits, const int32_t* labels, int N, int K, float label_smoothing,
                                float* loss, float* dlogits, int32_t* correct, cudaStream_t stream);

// Evaluation: the number of rows whose argmax equals the label (+= into *correct), and per-class
// counts when the arrays are given (+= into class_total[K], class_correct[K]).
void count_correct_cpu(const float* logits, const int32_t* labels, int N, int K, int64_t* correct, int64_t* class_total,
                       int64_t* class_correct);
void count_correct_cuda(const float* logits, const int32_t* labels, int N, int K, int64_t* correct,
                        int64_t* class_total, int64_t* class_correct, cudaStream_t stream);

}  // namespace cutrain
