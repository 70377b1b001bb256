// Softmax cross-entropy and the accuracy counts on the GPU against the CPU reference.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/cross_entropy.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

std::vector<int32_t> random_labels(int N, int K, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, K - 1);
  std::vector<int32_t> labels(N);
  for (int32_t& label : labels) label = dist(rng);
  return labels;
}

}  // namespace

TEST_CASE("softmax cross-entropy CUDA matches the CPU reference", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const auto [N, K] = GENERATE(table<int, int>({{256, 10}, {37, 1000}, {1, 3}}));
  const float smoothing = GENERATE(0.0f, 0.1f);
  INFO("N " << N << ", K " << K << ", label smoothing " << smoothing);
  std::mt19937 rng(41);
  const std::vector<float> logits = test::random_vector(size_t(N) * K, rng, -4.0f, 4.0f);
  const std::vector<int32_t> labels = random_labels(N, K, rng);
  std::vector<float> dlogits(logits.size());
  float loss;
  int32_t correct;
  softmax_cross_entropy_cpu(logits.data(), labels.data(), N, K, smoothing, &loss, dlogits.data(), &correct);

  PoisonedBuffer<float> glogits(logits), gdlogits(logits.size()), gloss(1);
  PoisonedBuffer<int32_t> glabels(labels), gcorrect(1);
  softmax_cross_entropy_cuda(glogits.get(), glabels.get(), N, K, smoothing, gloss.get(), gdlogits.get(),
                             gcorrect.get(), nullptr);
  CHECK(gloss.copy_to_host()[0] == Approx(loss).epsilon(1e-5));
  CHECK(gcorrect.copy_to_host()[0] == correct);
  CHECK(test::relative_error(gdlogits.copy_to_host(), dlogits) <= 1e-4);
}

TEST_CASE("count_correct CUDA adds the same counts as the CPU reference", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const int N = 1000, K = 10;
  std::mt19937 rng(42);
  const std::vector<float> logits = test::random_vector(size_t(N) * K, rng);
  const std::vector<int32_t> labels = random_labels(N, K, rng);
  int64_t correct = 5;
  std::vector<int64_t> total(K, 2), right(K, 1);
  count_correct_cpu(logits.data(), labels.data(), N, K, &correct, total.data(), right.data());

  PoisonedBuffer<float> glogits(logits);
  PoisonedBuffer<int32_t> glabels(labels);
  PoisonedBuffer<int64_t> gcorrect(std::vector<int64_t>{5}), gtotal(std::vector<int64_t>(K, 2)),
      gright(std::vector<int64_t>(K, 1));
  count_correct_cuda(glogits.get(), glabels.get(), N, K, gcorrect.get(), gtotal.get(), gright.get(), nullptr);
  CHECK(gcorrect.copy_to_host()[0] == correct);
  CHECK(gtotal.copy_to_host() == total);
  CHECK(gright.copy_to_host() == right);
}
