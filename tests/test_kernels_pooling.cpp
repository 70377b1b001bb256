// The poolings' CPU reference: forward against the definition, backward against finite differences.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/pooling.h"
#include "tests/gradcheck.h"

using namespace cutrain;

TEST_CASE("max pool 3x3/2 pad 1: forward by definition, backward by finite differences", "[kernels]") {
  const int size = GENERATE(5, 6, 7);  // odd and even edges
  const int N = 2, H = size, W = size + 1, C = 3, Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  INFO("H " << H << ", W " << W);
  // Distinct values 0.1 apart, shuffled: no ties, and a nudge of h = 0.01 never changes a maximum.
  std::vector<float> x(size_t(N) * H * W * C);
  std::iota(x.begin(), x.end(), 0.0f);
  std::mt19937 rng(3);
  std::shuffle(x.begin(), x.end(), rng);
  for (float& v : x) v *= 0.1f;

  std::vector<float> y(size_t(N) * Ho * Wo * C);
  maxpool3x3s2_forward_cpu(x.data(), N, H, W, C, y.data());
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < Ho; ++i)
      for (int j = 0; j < Wo; ++j)
        for (int c = 0; c < C; ++c) {
          float best = -1e30f;
          for (int h = std::max(0, 2 * i - 1); h <= std::min(H - 1, 2 * i + 1); ++h)
            for (int w = std::max(0, 2 * j - 1); w <= std::min(W - 1, 2 * j + 1); ++w)
              best = std::max(best, x[((size_t(n) * H + h) * W + w) * C + c]);
          CHECK(y[((size_t(n) * Ho + i) * Wo + j) * C + c] == best);
        }

  const std::vector<float> r = test::random_vector(y.size(), rng);
  std::vector<float> dx(x.size(), -7.0f);  // overwritten everywhere, zeros included
  maxpool3x3s2_backward_cpu(x.data(), r.data(), N, H, W, C, dx.data());
  auto loss = [&] {
    maxpool3x3s2_forward_cpu(x.data(), N, H, W, C, y.data());
    return test::weighted_sum(y, r);
  };
  // Piecewise linear: only rounding of the outputs that move, ~6e-8*|y|/2h < 1e-4.
  test::check_gradient("dx", x, dx, loss, 1e-2f, 1e-4, x.size());
}

TEST_CASE("max pool backward routes a tie to the first maximum of the window", "[kernels]") {
  // A 2x2 image of equal values: the single output window (rows -1..1, columns -1..1) sees all
  // four, and PyTorch routes the gradient to the first in row-major order, (0, 0).
  const std::vector<float> x(4, 1.0f), dy = {5.0f};
  std::vector<float> dx(4, -1.0f);
  REQUIRE(maxpool_out_size(2) == 1);
  maxpool3x3s2_backward_cpu(x.data(), dy.data(), 1, 2, 2, 1, dx.data());
  CHECK(dx == std::vector<float>{5, 0, 0, 0});
}

TEST_CASE("global average pool: forward by definition, backward by finite differences", "[kernels]") {
  const int N = 3, H = 4, W = 5, C = 6;
  std::mt19937 rng(4);
  std::vector<float> x = test::random_vector(size_t(N) * H * W * C, rng);
  std::vector<float> y(size_t(N) * C);
  global_avgpool_forward_cpu(x.data(), N, H, W, C, y.data());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double sum = 0;
      for (int p = 0; p < H * W; ++p) sum += x[(size_t(n) * H * W + p) * C + c];
      CHECK(y[n * C + c] == Approx(sum / (H * W)).margin(1e-6));
    }
  const std::vector<float> r = test::random_vector(y.size(), rng);
  std::vector<float> dx(x.size());
  global_avgpool_backward_cpu(r.data(), N, H, W, C, dx.data());
  auto loss = [&] {
    global_avgpool_forward_cpu(x.data(), N, H, W, C, y.data());
    return test::weighted_sum(y, r);
  };
  // Linear: one output moves by h/20, rounding ~6e-8/2h ~ 3e-6.
  test::check_gradient("dx", x, dx, loss, 1e-2f, 1e-4);
}
