// Batch norm's CPU reference: finite-difference gradients of the whole training forward for every
// fusion (x, gamma, beta, and the residual), the three-stage API split over two "ranks", and
// the running statistics by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/gradcheck.h"

using namespace cutrain;

namespace {

constexpr float kEps = 1e-5f;
constexpr float kMomentum = 0.1f;

struct BatchNormCase {
  int64_t M;
  int C;
  BatchNormFusion fusion;
  std::vector<float> x, residual, gamma, beta;
  std::vector<float> running_mean, running_var;

  BatchNormCase(int64_t M_, int C_, BatchNormFusion fusion_, std::mt19937& rng) : M(M_), C(C_), fusion(fusion_) {
    x = test::random_vector(M * C, rng, -1.0f, 2.0f);
    residual = test::random_vector(M * C, rng);
    gamma = test::random_vector(C, rng, 0.5f, 1.5f);
    beta = test::random_vector(C, rng, -0.5f, 0.5f);
    running_mean = test::random_vector(C, rng);
    running_var = test::random_vector(C, rng, 0.5f, 2.0f);
  }

  // The training forward (stages 1-3); mean and invstd are kept for the backward.
  std::vector<float> forward(std::vector<float>& mean, std::vector<float>& invstd, BatchNormFusion f) const {
    std::vector<float> s1(C), s2(C), rm = running_mean, rv = running_var, y(M * C);
    mean.resize(C);
    invstd.resize(C);
    bn_channel_sums_cpu(x.data(), M, C, s1.data(), s2.data());
    bn_finalize_stats_cpu(s1.data(), s2.data(), C, double(M), kEps, kMomentum, mean.data(), invstd.data(), rm.data(),
                          rv.data());
    bn_apply_cpu(x.data(), residual.data(), M, C, mean.data(), invstd.data(), gamma.data(), beta.data(), f, y.data());
    return y;
  }
  std::vector<float> forward() const {
    std::vector<float> mean, invstd;
    return forward(mean, invstd, fusion);
  }

  // Moves inputs whose pre-activation z lies within `margin` of ReLU's kink away from it, so no
  // finite difference straddles the kink (nudging x moves the statistics too, hence the passes).
  void keep_away_from_relu_kink(float margin) {
    for (int pass = 0; pass < 20; ++pass) {
      std::vector<float> mean, invstd;
      const std::vector<float> z = forward(mean, invstd, BatchNormFusion{false, fusion.residual});
      bool moved = false;
      for (int64_t i = 0; i < M * C; ++i) {
        if (std::abs(z[i]) >= margin) continue;
        const int c = int(i % C);
        x[i] += (z[i] >= 0 ? 3.0f : -3.0f) * margin / (gamma[c] * invstd[c]);
        moved = true;
      }
      if (!moved) return;
    }
    FAIL("could not move the pre-activations away from zero");
  }
};

struct BatchNormGrads {
  std::vector<float> dx, dgamma, dbeta, d_residual;
};

// The backward for dy (stages 1-2, count = M).
BatchNormGrads backward(const BatchNormCase& bn, const std::vector<float>& dy) {
  std::vector<float> mean, invstd;
  const std::vector<float> y = bn.forward(mean, invstd, bn.fusion);
  BatchNormGrads g{std::vector<float>(bn.M * bn.C), std::vector<float>(bn.C), std::vector<float>(bn.C),
                   std::vector<float>(bn.M * bn.C)};
  bn_backward_sums_cpu(bn.x.data(), y.data(), dy.data(), bn.M, bn.C, mean.data(), invstd.data(), bn.fusion,
                       g.dbeta.data(), g.dgamma.data(), g.d_residual.data());
  bn_backward_apply_cpu(bn.x.data(), y.data(), dy.data(), bn.M, bn.C, mean.data(), invstd.data(), bn.gamma.data(),
                        g.dbeta.data(), g.dgamma.data(), double(bn.M), bn.fusion, g.dx.data());
  return g;
}

}  // namespace

TEST_CASE("batch norm training gradients match finite differences, every fusion", "[nn]") {
  const auto [relu, residual] =
      GENERATE(table<bool, bool>({{false, false}, {true, false}, {false, true}, {true, true}}));
  INFO("relu " << relu << ", residual " << residual);
  std::mt19937 rng(11);
  BatchNormCase bn(2 * 3 * 4, 5, BatchNormFusion{relu, residual}, rng);
  if (relu) bn.keep_away_from_relu_kink(0.05f);
  const std::vector<float> r = test::random_vector(bn.M * bn.C, rng);
  const BatchNormGrads g = backward(bn, r);
  auto loss = [&] { return test::weighted_sum(bn.forward(), r); };

  // h = 1e-3: the truncation error h^2/6 * L''' stays near 1e-7 for these O(1) inputs; rounding
  // in every output of the channel (each depends on x through mean and invstd, ~24 outputs of
  // magnitude ~1) costs ~sqrt(24)*6e-8/2e-3 ~ 1.5e-4, the bound is 2e-3 with margin for L'''.
  test::check_gradient("dx", bn.x, g.dx, loss, 1e-3f, 2e-3);
  test::check_gradient("dgamma", bn.gamma, g.dgamma, loss, 1e-3f, 2e-3);
  test::check_gradient("dbeta", bn.beta, g.dbeta, loss, 1e-3f, 2e-3);
  if (residual) test::check_gradient("d_residual", bn.residual, g.d_residual, loss, 1e-3f, 2e-3);
}

TEST_CASE("batch norm's three stages over two ranks equal one rank over the whole batch", "[nn]") {
  // SyncBatchNorm: each rank sums its rows, the sums are added (all-reduced), and both ranks
  // finalize with the total count. Rank 0 holds rows [0, 10), rank 1 rows [10, 24).
  std::mt19937 rng(12);
  const BatchNormFusion fusion{true, true};
  BatchNormCase bn(24, 6, fusion, rng);
  const int64_t M0 = 10, M1 = bn.M - M0, C = bn.C;
  const std::vector<float> dy = test::random_vector(bn.M * C, rng);
  const float* x1 = bn.x.data() + M0 * C;

  std::vector<float> s1(C), s2(C), s1_rank1(C), s2_rank1(C);
  bn_channel_sums_cpu(bn.x.data(), M0, C, s1.data(), s2.data());
  bn_channel_sums_cpu(x1, M1, C, s1_rank1.data(), s2_rank1.data());
  for (int c = 0; c < C; ++c) {
    s1[c] += s1_rank1[c];
    s2[c] += s2_rank1[c];
  }
  std::vector<float> mean(C), invstd(C), rm = bn.running_mean, rv = bn.running_var, y(bn.M * C);
  bn_finalize_stats_cpu(s1.data(), s2.data(), C, double(bn.M), kEps, kMomentum, mean.data(), invstd.data(),
                        rm.data(), rv.data());
  bn_apply_cpu(bn.x.data(), bn.residual.data(), M0, C, mean.data(), invstd.data(), bn.gamma.data(), bn.beta.data(),
               fusion, y.data());
  bn_apply_cpu(x1, bn.residual.data() + M0 * C, M1, C, mean.data(), invstd.data(), bn.gamma.data(), bn.beta.data(),
               fusion, y.data() + M0 * C);
  // The sums in float differ from one pass over all rows by rounding only.
  CHECK(test::max_abs_difference(y, bn.forward()) <= 1e-5);

  std::vector<float> t1(C), t2(C), t1_rank1(C), t2_rank1(C), dres(bn.M * C), dx(bn.M * C);
  bn_backward_sums_cpu(bn.x.data(), y.data(), dy.data(), M0, C, mean.data(), invstd.data(), fusion, t1.data(),
                       t2.data(), dres.data());
  bn_backward_sums_cpu(x1, y.data() + M0 * C, dy.data() + M0 * C, M1, C, mean.data(), invstd.data(), fusion,
                       t1_rank1.data(), t2_rank1.data(), dres.data() + M0 * C);
  for (int c = 0; c < C; ++c) {
    t1[c] += t1_rank1[c];
    t2[c] += t2_rank1[c];
  }
  bn_backward_apply_cpu(bn.x.data(), y.data(), dy.data(), M0, C, mean.data(), invstd.data(), bn.gamma.data(),
                        t1.data(), t2.data(), double(bn.M), fusion, dx.data());
  bn_backward_apply_cpu(x1, y.data() + M0 * C, dy.data() + M0 * C, M1, C, mean.data(), invstd.data(),
                        bn.gamma.data(), t1.data(), t2.data(), double(bn.M), fusion, dx.data() + M0 * C);
  const BatchNormGrads whole = backward(bn, dy);
  CHECK(test::max_abs_difference(dx, whole.dx) <= 1e-5);
  CHECK(test::max_abs_difference(dres, whole.d_residual) == 0.0);
  CHECK(test::max_abs_difference(t1, whole.dbeta) <= 1e-5);
  CHECK(test::max_abs_difference(t2, whole.dgamma) <= 1e-5);
}

TEST_CASE("batch norm statistics by hand: biased variance to normalise, unbiased running variance", "[nn]") {
  // Channel 0 holds 1, 2, 3, 4: mean 2.5, biased variance 1.25, unbiased 5/3.
  // Channel 1 holds -2, 0, 2, 4: mean 1, biased variance 5, unbiased 20/3.
  // With momentum 0.1 from running (0.5, 2) and (0, 1):
  //   running_mean = 0.9*0.5 + 0.1*2.5 = 0.7,   0.9*0 + 0.1*1 = 0.1
  //   running_var  = 0.9*2 + 0.1*5/3 = 1.96667, 0.9*1 + 0.1*20/3 = 1.56667
  const std::vector<float> x = {1, -2, 2, 0, 3, 2, 4, 4};
  std::vector<float> s1(2), s2(2), mean(2), invstd(2), rm = {0.5f, 0.0f}, rv = {2.0f, 1.0f};
  bn_channel_sums_cpu(x.data(), 4, 2, s1.data(), s2.data());
  CHECK(s1 == std::vector<float>{10, 4});
  CHECK(s2 == std::vector<float>{30, 24});
  bn_finalize_stats_cpu(s1.data(), s2.data(), 2, 4.0, kEps, kMomentum, mean.data(), invstd.data(), rm.data(),
                        rv.data());
  CHECK(mean[0] == Approx(2.5));
  CHECK(mean[1] == Approx(1.0));
  CHECK(invstd[0] == Approx(1.0 / std::sqrt(1.25 + kEps)).epsilon(1e-6));
  CHECK(invstd[1] == Approx(1.0 / std::sqrt(5.0 + kEps)).epsilon(1e-6));
  CHECK(rm[0] == Approx(0.7).epsilon(1e-6));
  CHECK(rm[1] == Approx(0.1).epsilon(1e-6));
  CHECK(rv[0] == Approx(0.9 * 2 + 0.1 * 5.0 / 3.0).epsilon(1e-6));
  CHECK(rv[1] == Approx(0.9 * 1 + 0.1 * 20.0 / 3.0).epsilon(1e-6));

  // Eval mode normalises with the running statistics: y = gamma*(x - rm)/sqrt(rv + eps) + beta.
  bn_eval_stats_cpu(rm.data(), rv.data(), 2, kEps, mean.data(), invstd.data());
  const std::vector<float> gamma = {2.0f, 0.5f}, beta = {0.25f, -1.0f};
  std::vector<float> y(8);
  bn_apply_cpu(x.data(), nullptr, 4, 2, mean.data(), invstd.data(), gamma.data(), beta.data(), BatchNormFusion{},
               y.data());
  for (int i = 0; i < 8; ++i) {
    const int c = i % 2;
    INFO("element " << i);
    CHECK(y[i] == Approx(gamma[c] * (x[i] - rm[c]) / std::sqrt(rv[c] + kEps) + beta[c]).margin(1e-6));
  }
}
