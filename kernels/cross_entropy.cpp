// cross_entropy.cpp: the CPU reference of cross_entropy.h, one row at a time, with the shared
// math of cross_entropy.cuh. The batch loss accumulates in double.
#include "kernels/cross_entropy.h"

#include <stdexcept>
#include <string>

#include "kernels/cross_entropy.cuh"

namespace cutrain {

namespace {

void check_label(int32_t label, int n, int K) {
  if (!ce_label_valid(label, K))
    throw std::runtime_error("cross-entropy: label " + std::to_string(label) + " of row " + std::to_string(n) +
                             " is outside [0, " + std::to_string(K) + ")");
}

int row_argmax(const float* row, int K) {
  int best = 0;
  for (int k = 1; k < K; ++k)
    if (argmax_prefers(row[k], k, row[best], best)) best = k;
  return best;
}

}  // namespace

void softmax_cross_entropy_cpu(const float* logits, const int32_t* labels, int N, int K, float label_smoothing,
                               float* loss, float* dlogits, int32_t* correct) {
  double total = 0.0;
  int32_t hits = 0;
  for (int n = 0; n < N; ++n) {
    const float* row = logits + int64_t(n) * K;
    const int label = labels[n];
    check_label(label, n, K);
    const int best = row_argmax(row, K);
    const float max = row[best];
    float sum_exp = 0.0f, sum_logits = 0.0f;
    for (int k = 0; k < K; ++k) {
      sum_exp += expf(row[k] - max);
      sum_logits += row[k];
    }
    total += ce_row_loss(max, sum_exp, row[label], sum_logits, label_smoothing, K);
    hits += best == label;
    for (int k = 0; k < K; ++k)
      dlogits[int64_t(n) * K + k] = ce_grad(row[k], max, sum_exp, ce_target(k, label, label_smoothing, K), N);
  }
  *loss = float(total / N);
  *correct = hits;
}

void count_correct_cpu(const float* logits, const int32_t* labels, int N, int K, int64_t* correct, int64_t* class_total,
                       int64_t* class_correct) {
  for (int n = 0; n < N; ++n) {
    const int label = labels[n];
    check_label(label, n, K);
    const bool hit = row_argmax(logits + int64_t(n) * K, K) == label;
    *correct += hit;
    if (class_total) class_total[label] += 1;
    if (class_correct) class_correct[label] += hit;
  }
}

}  // namespace cutrain
