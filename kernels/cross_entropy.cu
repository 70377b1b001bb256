// cross_entropy.cu: the CUDA side of cross_entropy.h, with the math of cross_entropy.cuh.
//
// One warp per row: the 32 lanes stride over the K logits and combine with butterfly shuffles
// (max and argmax first, then sum of exp and sum of logits, then the gradient). The loss kernel is
// a single block whose warps take rows in turn and add up the loss and hits in a fixed order, so
// the batch loss is written (=) deterministically, without atomics or a zeroing pass.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "kernels/cross_entropy.cuh"
#include "kernels/launch.cuh"

namespace cutrain {

namespace {

constexpr int kWarp = 32;
constexpr unsigned kAllLanes = 0xffffffffu;

// Every lane ends with the sum over the warp.
__device__ float warp_sum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(kAllLanes, value, offset);
  return value;
}

struct ArgMax {
  float value;
  int k;
};

// argmax of row[0..K) (argmax_prefers' order), every lane ending with it. Lanes start from
// (-inf, K), which any real logit beats or ties with a lower index.
__device__ ArgMax warp_row_argmax(const float* row, int K, int lane) {
  ArgMax best{-INFINITY, K};
  for (int k = lane; k < K; k += kWarp)
    if (argmax_prefers(row[k], k, best.value, best.k)) best = {row[k], k};
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const ArgMax other{__shfl_xor_sync(kAllLanes, best.value, offset), __shfl_xor_sync(kAllLanes, best.k, offset)};
    if (argmax_prefers(other.value, other.k, best.value, best.k)) best = other;
  }
  return best;
}

struct RowResult {
  float loss;  // NaN for a label outside [0, K), which the CPU twin reports as an error
  bool hit;    // argmax == label
};

// One row's loss and gradient drow, by a whole warp.
__device__ RowResult softmax_cross_entropy_row(const float* row, int label, int N, int K, float eps, float* drow,
                                               int lane) {
  const ArgMax best = warp_row_argmax(row, K, lane);
  float sum_exp = 0.0f, sum_logits = 0.0f;
  for (int k = lane; k < K; k += kWarp) {
    sum_exp += expf(row[k] - best.value);
    sum_logits += row[k];
  }
  sum_exp = warp_sum(sum_exp);
  sum_logits = warp_sum(sum_logits);
  for (int k = lane; k < K; k += kWarp) drow[k] = ce_grad(row[k], best.value, sum_exp, ce_target(k, label, eps, K), N);
  if (!ce_label_valid(label, K)) return {NAN, false};
  return {ce_row_loss(best.value, sum_exp, row[label], sum_logits, eps, K), best.k == label};
}

// loss = (1/N) sum_n row_loss(n),  dlogits = (p - target)/N,  correct = #rows with argmax == label
__global__ void softmax_cross_entropy_kernel(const float* logits, const int32_t* labels, int N, int K, float eps,
                                             float* loss, float* dlogits, int32_t* correct) {
  __shared__ float warp_loss[kWarp];
  __shared__ int warp_hits[kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  float loss_sum = 0.0f;
  int hits = 0;
  for (int n = warp; n < N; n += warps) {
    const RowResult row =
        softmax_cross_entropy_row(logits + int64_t(n) * K, labels[n], N, K, eps, dlogits + int64_t(n) * K, lane);
    loss_sum += row.loss;
    hits += row.hit;
  }
  if (lane == 0) {
    warp_loss[warp] = loss_sum;
    warp_hits[warp] = hits;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    int total_hits = 0;
    for (int w = 0; w < warps; ++w) {
      total += warp_loss[w];
      total_hits += warp_hits[w];
    }
    *loss = total / float(N);
    *correct = total_hits;
  }
}

// correct += #rows with argmax == label; class_total[label] += 1, class_correct[label] += hit.
// Rows with a label outside [0, K) are not counted.
__global__ void count_correct_kernel(const float* logits, const int32_t* labels, int N, int K,
                                     unsigned long long* correct, unsigned long long* class_total,
                                     unsigned long long* class_correct) {
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int n = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; n < N; n += warps) {
    const ArgMax best = warp_row_argmax(logits + int64_t(n) * K, K, lane);
    const int label = labels[n];
    if (lane != 0 || !ce_label_valid(label, K)) continue;
    const bool hit = best.k == label;
    if (hit) atomicAdd(correct, 1ull);
    if (class_total) atomicAdd(&class_total[label], 1ull);
    if (class_correct && hit) atomicAdd(&class_correct[label], 1ull);
  }
}

}  // namespace

void softmax_cross_entropy_cuda(const float* logits, const int32_t* labels, int N, int K, float label_smoothing,
                                float* loss, float* dlogits, int32_t* correct, cudaStream_t stream) {
  const int warps = std::clamp(N, 1, kWarp);
  const int64_t logit_bytes = int64_t(N) * K * int64_t(sizeof(float));
  const Traffic bytes{logit_bytes + N * int64_t(sizeof(int32_t)),
                      logit_bytes + int64_t(sizeof(float) + sizeof(int32_t))};
  launch_kernel({"softmax_cross_entropy_kernel", bytes}, softmax_cross_entropy_kernel, 1, warps * kWarp, 0, stream,
                logits, labels, N, K, label_smoothing, loss, dlogits, correct);
}

void count_correct_cuda(const float* logits, const int32_t* labels, int N, int K, int64_t* correct,
                        int64_t* class_total, int64_t* class_correct, cudaStream_t stream) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long), "counts are added as unsigned long long");
  constexpr int kWarpsPerBlock = 8;
  const int blocks = std::clamp((N + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, 1024);
  const Traffic bytes{int64_t(N) * K * int64_t(sizeof(float)) + N * int64_t(sizeof(int32_t)),
                      (class_total ? 2 * K + 1 : 1) * int64_t(sizeof(int64_t))};
  launch_kernel({"count_correct_kernel", bytes}, count_correct_kernel, blocks, kWarpsPerBlock * kWarp, 0, stream,
                logits, labels, N, K, reinterpret_cast<unsigned long long*>(correct),
                reinterpret_cast<unsigned long long*>(class_total),
                reinterpret_cast<unsigned long long*>(class_correct));
}

}  // namespace cutrain
