// Softmax cross-entropy's CPU reference: the loss against a float64 evaluation of the definition,
// the gradient against finite differences, with and without label smoothing; the accuracy counts.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cross_entropy.h"
#include "tests/gradcheck.h"

using namespace cutrain;

namespace {

// -(1/N) sum_n sum_k target[n,k] * log softmax(l[n])_k in double, target = (1-eps)*onehot + eps/K.
double reference_loss(const std::vector<float>& logits, const std::vector<int32_t>& labels, int K, double eps) {
  const int N = int(labels.size());
  double total = 0;
  for (int n = 0; n < N; ++n) {
    double sum_exp = 0;
    for (int k = 0; k < K; ++k) sum_exp += std::exp(double(logits[n * K + k]));
    for (int k = 0; k < K; ++k) {
      const double target = (k == labels[n] ? 1 - eps : 0) + eps / K;
      total -= target * (logits[n * K + k] - std::log(sum_exp));
    }
  }
  return total / N;
}

}  // namespace

TEST_CASE("softmax cross-entropy: loss by definition, gradient by finite differences", "[kernels]") {
  const float smoothing = GENERATE(0.0f, 0.1f);
  INFO("label smoothing " << smoothing);
  const int N = 6, K = 10;
  std::mt19937 rng(5);
  std::vector<float> logits = test::random_vector(N * K, rng, -3.0f, 3.0f);
  const std::vector<int32_t> labels = {3, 0, 9, 9, 5, 1};
  std::vector<float> dlogits(N * K);
  float loss = 0;
  int32_t correct = -1;
  softmax_cross_entropy_cpu(logits.data(), labels.data(), N, K, smoothing, &loss, dlogits.data(), &correct);
  CHECK(loss == Approx(reference_loss(logits, labels, K, smoothing)).epsilon(1e-6));

  int expected_correct = 0;
  for (int n = 0; n < N; ++n) {
    int best = 0;
    for (int k = 1; k < K; ++k) best = logits[n * K + k] > logits[n * K + best] ? k : best;
    expected_correct += best == labels[n];
  }
  CHECK(correct == expected_correct);

  std::vector<float> scratch(N * K);
  auto loss_of_logits = [&] {
    float value;
    int32_t hits;
    softmax_cross_entropy_cpu(logits.data(), labels.data(), N, K, smoothing, &value, scratch.data(), &hits);
    return double(value);
  };
  // The loss is one float of magnitude ~2 (rounding ~1.2e-7) divided by 2h = 2e-2: ~1e-5;
  // truncation h^2/6 * L''' ~ 1e-5 * 0.1/N. Gradients are ~0.1/N in size: bound 1e-4 absolute.
  test::check_gradient("dlogits", logits, dlogits, loss_of_logits, 1e-2f, 1e-4, logits.size());
}

TEST_CASE("count_correct adds to the totals and the per-class counts, and a bad label is named", "[kernels]") {
  // Row argmaxes: 2, 0, 1 (the tie in row 1 goes to the lower index, 0).
  const std::vector<float> logits = {0, 1, 5, 4, 4, 1, -1, 2, 0};
  const std::vector<int32_t> labels = {2, 1, 1};
  int64_t correct = 10;
  std::vector<int64_t> total = {1, 1, 1}, right = {0, 0, 0};
  count_correct_cpu(logits.data(), labels.data(), 3, 3, &correct, total.data(), right.data());
  CHECK(correct == 12);
  CHECK(total == std::vector<int64_t>{1, 3, 2});
  CHECK(right == std::vector<int64_t>{0, 1, 1});
  count_correct_cpu(logits.data(), labels.data(), 3, 3, &correct, nullptr, nullptr);
  CHECK(correct == 14);

  const std::vector<int32_t> bad = {2, 3, 1};
  CHECK_THROWS_WITH(count_correct_cpu(logits.data(), bad.data(), 3, 3, &correct, nullptr, nullptr),
                    "cross-entropy: label 3 of row 1 is outside [0, 3)");
}
