// Batch norm's CPU reference: finite-difference gradients of the whole training forward for every
// fusion (x, gamma, beta, and the residual), SyncBatchNorm's staged path split over two "ranks",
// and the statistics by hand, and the two forms before a fused convolution against the training
// forward and the backward. Then the CUDA launch plans, which need no GPU: their grids, what they
// keep in shared memory, and the bytes they move.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/batchnorm_buffers.h"
#include "tests/gradcheck.h"

using namespace cutrain;

namespace {

// An H200: 132 multiprocessors, one block of 1024 threads on each, 227 KiB of shared memory per block.
constexpr BatchNormDevice kH200{132, 1024, 227 * 1024};

constexpr float kEps = 1e-5f;
constexpr float kMomentum = 0.1f;

struct BatchNormCase {
  BatchNormShape shape;
  test::BatchNormInputs in;

  BatchNormCase(int64_t M, int C, BatchNormFusion fusion, std::mt19937& rng) : shape{M, C, fusion} {
    in.x = test::random_vector(M * C, rng, -1.0f, 2.0f);
    in.residual = test::random_vector(M * C, rng);
    in.dy = std::vector<float>(M * C, 0.0f);
    in.gamma = test::random_vector(C, rng, 0.5f, 1.5f);
    in.beta = test::random_vector(C, rng, -0.5f, 0.5f);
    in.running_mean = test::random_vector(C, rng);
    in.running_var = test::random_vector(C, rng, 0.5f, 2.0f);
  }
  int64_t numel() const { return shape.rows * shape.channels; }

  // A training forward (under another fusion, if given).
  test::HostBatchNorm forward(BatchNormFusion fusion) const {
    const BatchNormShape s{shape.rows, shape.channels, fusion};
    test::HostBatchNorm o(s, in);
    bn_forward_train_cpu(s, o.forward());
    return o;
  }
  test::HostBatchNorm forward() const { return forward(shape.fusion); }

  // The forward, then the backward for dy (count = M).
  test::HostBatchNorm backward(const std::vector<float>& dy) const {
    test::BatchNormInputs with_dy = in;
    with_dy.dy = dy;
    test::HostBatchNorm o(shape, with_dy);
    bn_forward_train_cpu(shape, o.forward());
    bn_backward_cpu(shape, o.backward());
    return o;
  }

  // Moves inputs whose pre-activation z lies within `margin` of ReLU's kink away from it, so no
  // finite difference straddles the kink (nudging x moves the statistics too, hence the passes).
  void keep_away_from_relu_kink(float margin) {
    for (int pass = 0; pass < 20; ++pass) {
      const test::HostBatchNorm o = forward(BatchNormFusion{false, shape.fusion.residual});
      bool moved = false;
      for (int64_t i = 0; i < numel(); ++i) {
        if (std::abs(o.y[i]) >= margin) continue;
        const int c = int(i % shape.channels);
        in.x[i] += (o.y[i] >= 0 ? 3.0f : -3.0f) * margin / (in.gamma[c] * o.invstd[c]);
        moved = true;
      }
      if (!moved) return;
    }
    FAIL("could not move the pre-activations away from zero");
  }
};

}  // namespace

TEST_CASE("batch norm training gradients match finite differences, every fusion", "[kernels]") {
  const auto [relu, residual] =
      GENERATE(table<bool, bool>({{false, false}, {true, false}, {false, true}, {true, true}}));
  INFO("relu " << relu << ", residual " << residual);
  std::mt19937 rng(11);
  BatchNormCase bn(2 * 3 * 4, 5, BatchNormFusion{relu, residual}, rng);
  if (relu) bn.keep_away_from_relu_kink(0.05f);
  const std::vector<float> r = test::random_vector(bn.numel(), rng);
  const test::HostBatchNorm g = bn.backward(r);
  auto loss = [&] { return test::weighted_sum(bn.forward().y, r); };

  // h = 1e-3: the truncation error h^2/6 * L''' stays near 1e-7 for these O(1) inputs; rounding
  // in every output of the channel (each depends on x through mean and invstd, ~24 outputs of
  // magnitude ~1) costs ~sqrt(24)*6e-8/2e-3 ~ 1.5e-4, the bound is 2e-3 with margin for L'''.
  test::check_gradient("dx", bn.in.x, g.dx, loss, 1e-3f, 2e-3);
  test::check_gradient("dgamma", bn.in.gamma, g.dgamma, loss, 1e-3f, 2e-3);
  test::check_gradient("dbeta", bn.in.beta, g.dbeta, loss, 1e-3f, 2e-3);
  if (residual) test::check_gradient("d_residual", bn.in.residual, g.d_residual, loss, 1e-3f, 2e-3);
}

TEST_CASE("batch norm's SyncBatchNorm stages over two ranks equal one rank over the whole batch", "[kernels]") {
  // Each rank computes its rows' statistics; the sum, then each rank's share of m2 about the
  // global mean, are added (all-reduced), and both ranks finalize with the total count. Rank 0
  // holds rows [0, 10), rank 1 rows [10, 24). The test plays the all-reduce.
  std::mt19937 rng(12);
  const BatchNormFusion fusion{true, true};
  const BatchNormCase bn(24, 6, fusion, rng);
  const int64_t rows[2] = {10, 14}, first[2] = {0, 10};
  const int C = bn.shape.channels;
  const double count = double(bn.shape.rows);
  const std::vector<float> dy = test::random_vector(bn.numel(), rng);
  const test::HostBatchNorm whole = bn.backward(dy);

  // Each rank: its rows of x, residual and dy, and of every output; its own running statistics.
  struct Rank {
    BatchNormShape shape;
    test::HostBatchNorm on;
    std::vector<float> stats, sums;
  };
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    const auto slice = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + first[r] * C, v.begin() + (first[r] + rows[r]) * C);
    };
    test::BatchNormInputs in = bn.in;
    in.x = slice(bn.in.x);
    in.residual = slice(bn.in.residual);
    in.dy = slice(dy);
    const BatchNormShape shape{rows[r], C, fusion};
    ranks.push_back({shape, test::HostBatchNorm(shape, in), std::vector<float>(4 * C), std::vector<float>(2 * C)});
  }
  const auto all_reduce = [&](std::vector<float> Rank::*member, size_t offset, size_t n) {
    for (size_t i = offset; i < offset + n; ++i) {
      const float sum = (ranks[0].*member)[i] + (ranks[1].*member)[i];
      (ranks[0].*member)[i] = (ranks[1].*member)[i] = sum;
    }
  };
  const auto stats = [&](Rank& rank) { return BatchNormRankStats::in(rank.stats.data(), C); };
  for (Rank& rank : ranks) bn_rank_statistics_cpu(rank.shape, rank.on.in.x.data(), stats(rank));
  all_reduce(&Rank::stats, 2 * C, C);
  for (Rank& rank : ranks) bn_rank_m2_cpu(rank.shape, stats(rank), count);
  all_reduce(&Rank::stats, 3 * C, C);
  for (Rank& rank : ranks) bn_forward_apply_cpu(rank.shape, rank.on.forward(), stats(rank), count);
  for (Rank& rank : ranks) bn_backward_sums_cpu(rank.shape, rank.on.backward(), rank.sums.data());
  std::vector<float> dgamma(C), dbeta(C);
  for (int c = 0; c < C; ++c) {  // DDP's average, times the two ranks
    dgamma[c] = ranks[0].on.dgamma[c] + ranks[1].on.dgamma[c];
    dbeta[c] = ranks[0].on.dbeta[c] + ranks[1].on.dbeta[c];
  }
  all_reduce(&Rank::sums, 0, 2 * C);
  for (Rank& rank : ranks) bn_backward_apply_cpu(rank.shape, rank.on.backward(), rank.sums.data(), count);

  // Statistics in float (the ranks' shares rounded before adding) differ from one pass over all
  // rows by rounding only.
  for (const Rank& rank : ranks) {
    CHECK(test::max_abs_difference(rank.on.mean, whole.mean) <= 1e-6);
    CHECK(test::max_abs_difference(rank.on.invstd, whole.invstd) <= 1e-5);
    CHECK(test::max_abs_difference(rank.on.running_var, whole.running_var) <= 1e-6);
    CHECK(test::max_abs_difference(rank.on.running_mean, whole.running_mean) <= 1e-6);
  }
  const auto joined = [&](auto member) {
    auto v = ranks[0].on.*member;
    v.insert(v.end(), (ranks[1].on.*member).begin(), (ranks[1].on.*member).end());
    return v;
  };
  CHECK(test::max_abs_difference(joined(&test::HostBatchNorm::y), whole.y) <= 1e-5);
  CHECK(joined(&test::HostBatchNorm::mask) == whole.mask);
  CHECK(test::max_abs_difference(joined(&test::HostBatchNorm::dx), whole.dx) <= 1e-5);
  CHECK(test::max_abs_difference(joined(&test::HostBatchNorm::d_residual), whole.d_residual) == 0.0);
  CHECK(test::max_abs_difference(dgamma, whole.dgamma) <= 1e-5);
  CHECK(test::max_abs_difference(dbeta, whole.dbeta) <= 1e-5);
}

// A layer without a ReLU (the downsample's) plans no mask, so a mask written anyway would land in
// whatever tensor the plan placed next: the mask is written only under the ReLU fusion, as on the GPU.
TEST_CASE("batch norm without a ReLU writes no mask in training or evaluation", "[kernels]") {
  std::mt19937 rng(7);
  const BatchNormCase bn(40, 12, BatchNormFusion{false, true}, rng);
  test::HostBatchNorm o(bn.shape, bn.in);
  std::fill(o.mask.begin(), o.mask.end(), uint8_t(0xAB));
  bn_forward_train_cpu(bn.shape, o.forward());
  bn_forward_eval_cpu(bn.shape, o.forward());
  CHECK(o.mask == std::vector<uint8_t>(o.mask.size(), uint8_t(0xAB)));
}

TEST_CASE("batch norm statistics by hand: biased variance to normalise, unbiased running variance", "[kernels]") {
  // Channel 0 holds 1, 2, 3, 4: mean 2.5, biased variance 1.25, unbiased 5/3.
  // Channel 1 holds -2, 0, 2, 4: mean 1, biased variance 5, unbiased 20/3.
  // With momentum 0.1 from running (0.5, 2) and (0, 1):
  //   running_mean = 0.9*0.5 + 0.1*2.5 = 0.7,   0.9*0 + 0.1*1 = 0.1
  //   running_var  = 0.9*2 + 0.1*5/3 = 1.96667, 0.9*1 + 0.1*20/3 = 1.56667
  // With gamma (2, 0.5), beta (0.25, 0.5) and the ReLU, y = relu(gamma*(x - mean)*invstd + beta):
  // z = (-2.43, -0.64, 1.14, 2.93) in channel 0 and (-0.17, 0.28, 0.72, 1.17) in channel 1, so
  // three values are cut to 0, their mask bits clear.
  const std::vector<float> x = {1, -2, 2, 0, 3, 2, 4, 4}, gamma = {2.0f, 0.5f}, beta = {0.25f, 0.5f};
  std::vector<float> y(8), mean(2), invstd(2), rm = {0.5f, 0.0f}, rv = {2.0f, 1.0f};
  std::vector<uint8_t> mask(4);
  const BatchNormShape shape{4, 2, BatchNormFusion{true, false}};
  BatchNormForward<float> f;
  f.x = x.data();
  f.gamma = gamma.data();
  f.beta = beta.data();
  f.eps = kEps;
  f.momentum = kMomentum;
  f.y = y.data();
  f.relu_mask = mask.data();
  f.mean = mean.data();
  f.invstd = invstd.data();
  f.running_mean = rm.data();
  f.running_var = rv.data();
  bn_forward_train_cpu(shape, f);
  CHECK(mean[0] == Approx(2.5));
  CHECK(mean[1] == Approx(1.0));
  CHECK(invstd[0] == Approx(1.0 / std::sqrt(1.25 + kEps)).epsilon(1e-6));
  CHECK(invstd[1] == Approx(1.0 / std::sqrt(5.0 + kEps)).epsilon(1e-6));
  CHECK(rm[0] == Approx(0.7).epsilon(1e-6));
  CHECK(rm[1] == Approx(0.1).epsilon(1e-6));
  CHECK(rv[0] == Approx(0.9 * 2 + 0.1 * 5.0 / 3.0).epsilon(1e-6));
  CHECK(rv[1] == Approx(0.9 * 1 + 0.1 * 20.0 / 3.0).epsilon(1e-6));
  for (int i = 0; i < 8; ++i) {
    const int c = i % 2;
    const double z = gamma[c] * (x[i] - mean[c]) * invstd[c] + beta[c];
    INFO("element " << i);
    CHECK(y[i] == Approx(std::max(z, 0.0)).margin(1e-6));
  }
  // Row m's byte: bit 0 channel 0, bit 1 channel 1.
  CHECK(mask == std::vector<uint8_t>{0b00, 0b10, 0b11, 0b11});

  // Eval mode normalises with the running statistics: y = gamma*(x - rm)/sqrt(rv + eps) + beta.
  const BatchNormShape plain{4, 2, BatchNormFusion{}};
  bn_forward_eval_cpu(plain, f);
  for (int i = 0; i < 8; ++i) {
    const int c = i % 2;
    INFO("element " << i);
    CHECK(y[i] == Approx(gamma[c] * (x[i] - rm[c]) / std::sqrt(rv[c] + kEps) + beta[c]).margin(1e-6));
  }
}

TEST_CASE("batch norm plans: one block per multiprocessor, rows kept while they fit, bytes counted", "[kernels]") {
  // ResNet-18's four stages at batch 256 in bf16, on an H200: 132 blocks of 1024 threads with
  // 227 KiB of shared memory each.
  const BatchNormDevice h200 = kH200;
  struct Stage {
    int64_t rows;
    int channels;
  };
  const Stage stages[] = {{256 * 32 * 32, 64}, {256 * 16 * 16, 128}, {256 * 8 * 8, 256}, {256 * 4 * 4, 512}};
  for (const Stage& stage : stages) {
    const BatchNormShape shape{stage.rows, stage.channels, BatchNormFusion{true, true}};
    INFO("rows " << stage.rows << ", channels " << stage.channels);
    const int64_t tensor = stage.rows * stage.channels * 2, mask = stage.rows * stage.channels / 8;
    for (BatchNormPass pass : {BatchNormPass::forward_train, BatchNormPass::backward}) {
      const BatchNormPlan plan = bn_plan(pass, shape, 2, h200);
      const bool forward = pass == BatchNormPass::forward_train;
      INFO((forward ? "forward" : "backward") << ": grid " << plan.grid.x << "x" << plan.grid.y << ", kept rows "
                                              << plan.cached_rows << ", read " << plan.bytes_read);
      CHECK(plan.block.x * plan.block.y == 1024);
      CHECK(int64_t(plan.grid.x) * plan.grid.y <= h200.blocks);
      CHECK(int64_t(plan.grid.x) * plan.grid.y > h200.blocks * 9 / 10);  // the GPU is full
      CHECK(plan.shared_bytes <= h200.shared_bytes);
      CHECK(int64_t(plan.grid.y) * plan.rows_per_block >= stage.rows);
      CHECK(plan.partial_floats == int64_t(plan.grid.y) * stage.channels * (forward ? 3 : 2));
      // Whatever is not kept is read twice: the first time for the statistics, then to apply them.
      const int64_t kept = std::min<int64_t>(stage.rows, int64_t(plan.grid.y) * plan.cached_rows * plan.block.y);
      const int64_t reread = (stage.rows - kept) * stage.channels * 2;
      const int64_t small = plan.partial_bytes_read + 64 * int64_t(plan.grid.y) * stage.channels;
      if (forward) {
        CHECK(plan.bytes_read >= 2 * tensor + reread);  // x once (+ what was not kept), the residual
        CHECK(plan.bytes_read <= 2 * tensor + reread + small);
        CHECK(plan.bytes_written >= tensor + mask);  // y, the mask
        CHECK(plan.bytes_written <= tensor + mask + small);
      } else {
        CHECK(plan.bytes_read >= 2 * tensor + mask + 2 * reread);  // x, dy, the mask
        CHECK(plan.bytes_read <= 2 * tensor + mask + (2 + 1.0 / 16) * reread + small);
        CHECK(plan.bytes_written >= 2 * tensor);  // dx, d_residual
        CHECK(plan.bytes_written <= 2 * tensor + small);
      }
      // The 8x8 and 4x4 stages keep every row, forward and backward; the 16x16 stage forward.
      if (stage.channels >= 256 || (stage.channels == 128 && forward)) CHECK(reread == 0);
      if (stage.channels == 64) CHECK(reread > 0);
    }
  }
  // Twice the batch: twice the bytes of the tensors.
  const BatchNormShape small{256 * 4 * 4, 512, BatchNormFusion{}}, large{512 * 4 * 4, 512, BatchNormFusion{}};
  const BatchNormPlan eval_small = bn_plan(BatchNormPass::forward_eval, small, 2, h200);
  const BatchNormPlan eval_large = bn_plan(BatchNormPass::forward_eval, large, 2, h200);
  CHECK(eval_large.bytes_written == 2 * eval_small.bytes_written);
  CHECK(eval_small.bytes_written == small.rows * 512 * 2);
  // Too many channels for the blocks the device holds side by side, or no rows at all.
  CHECK_NOTHROW(bn_plan(BatchNormPass::forward_train, BatchNormShape{1000, 64, {}}, 4, BatchNormDevice{1, 32, 4096}));
  CHECK_THROWS_WITH(bn_plan(BatchNormPass::forward_train, BatchNormShape{1000, 512, {}}, 4, BatchNormDevice{4, 1024, 1 << 20}),
                    Catch::Contains("512 channels need 8 blocks side by side, the device holds 4"));
  CHECK_THROWS(bn_plan(BatchNormPass::backward, BatchNormShape{0, 64, {}}, 2, h200));
}

TEST_CASE("batch norm split plans: the cooperative grid, nothing kept, x read again by an apply launch", "[kernels]") {
  // Note [Split batch norm], for ResNet-18's first stage at batch 256 in bf16 on an H200.
  const BatchNormDevice h200 = kH200;
  const BatchNormShape shape{256 * 32 * 32, 64, BatchNormFusion{true, true}};
  const int64_t tensor = shape.rows * 64 * 2, mask = shape.rows * 64 / 8;
  for (BatchNormPass pass : {BatchNormPass::forward_train, BatchNormPass::backward}) {
    const bool forward = pass == BatchNormPass::forward_train;
    INFO((forward ? "forward" : "backward"));
    const BatchNormPlan cooperative = bn_plan(pass, shape, 2, h200);
    const BatchNormPlan split = bn_plan(pass, shape, 2, h200, BatchNormLaunch::split);
    CHECK(split.launch == BatchNormLaunch::split);
    CHECK((split.grid.x == cooperative.grid.x && split.grid.y == cooperative.grid.y));  // the same partials
    CHECK((split.block.x == cooperative.block.x && split.block.y == cooperative.block.y));
    CHECK(split.rows_per_block == cooperative.rows_per_block);
    CHECK(split.cached_rows == 0);
    CHECK(split.shared_bytes < cooperative.shared_bytes);
    CHECK(split.partial_floats == cooperative.partial_floats + 4);  // the ticket, 16 bytes in front
    CHECK(int64_t(split.apply_block.x) * split.apply_block.y == 256);
    // The apply launch reads x again (backward: x, dy and the mask) and writes y and the mask (dx).
    const int64_t small = 64 * int64_t(split.apply_grid.y) * 64;
    CHECK(split.apply_bytes_read >= (forward ? 2 * tensor : 2 * tensor + mask));
    CHECK(split.apply_bytes_read <= (forward ? 2 * tensor : 2 * tensor + mask) + small);
    CHECK(split.apply_bytes_written == (forward ? tensor + mask : tensor));
    CHECK(split.bytes_read - split.apply_bytes_read >= (forward ? tensor : 2 * tensor + mask));
    CHECK(split.bytes_read > cooperative.bytes_read);
  }
  // A split launch's last block must hold a slice of every chunk in its scratch.
  CHECK_THROWS_WITH(bn_plan(BatchNormPass::forward_train, BatchNormShape{100000, 8, {}}, 4,
                            BatchNormDevice{4096, 32, 1 << 20}, BatchNormLaunch::split),
                    Catch::Contains("a split launch's last block merges"));
}

TEST_CASE("batch norm's statistics form has the training forward's statistics, and scale and shift by their formula",
          "[kernels]") {
  std::mt19937 rng(31);
  const BatchNormCase bn(200, 12, BatchNormFusion{true, false}, rng);
  const test::HostBatchNorm train = bn.forward();
  test::HostBatchNorm o(bn.shape, bn.in);
  std::fill(o.y.begin(), o.y.end(), -7.0f);
  std::fill(o.mask.begin(), o.mask.end(), uint8_t(0xAB));
  std::vector<float> scale(12), shift(12);
  bn_forward_statistics_cpu(bn.shape, o.forward(), scale.data(), shift.data());
  CHECK(o.mean == train.mean);
  CHECK(o.invstd == train.invstd);
  CHECK(o.running_mean == train.running_mean);
  CHECK(o.running_var == train.running_var);
  for (int c = 0; c < 12; ++c) {
    INFO("channel " << c);
    const float expected_scale = bn.in.gamma[c] * o.invstd[c];
    const volatile float mean_times_scale = o.mean[c] * expected_scale;
    CHECK(scale[c] == expected_scale);
    CHECK(shift[c] == bn.in.beta[c] - mean_times_scale);
  }
  CHECK(o.y == std::vector<float>(o.y.size(), -7.0f));  // no y, no mask
  CHECK(o.mask == std::vector<uint8_t>(o.mask.size(), uint8_t(0xAB)));
  const BatchNormShape with_residual{200, 12, BatchNormFusion{true, true}};
  CHECK_THROWS_WITH(bn_forward_statistics_cpu(with_residual, o.forward(), scale.data(), shift.data()),
                    Catch::Contains("a ReLU without the residual"));
}

TEST_CASE("batch norm's recompute backward is the backward with the prologue's mask, and writes its activation",
          "[kernels]") {
  // The mask of z = x*scale + shift, built here, given to bn_backward: the recompute form must give
  // the same bits, and max(z, 0) as the activation. Some 40 % of z are cut by the ReLU.
  std::mt19937 rng(32);
  const int64_t M = 300;
  const int C = 20;  // two and a half mask bytes a row
  BatchNormCase bn(M, C, BatchNormFusion{true, false}, rng);
  bn.in.dy = test::random_vector(M * C, rng);
  test::HostBatchNorm with_mask(bn.shape, bn.in);
  std::vector<float> scale(C), shift(C);
  bn_forward_statistics_cpu(bn.shape, with_mask.forward(), scale.data(), shift.data());
  test::HostBatchNorm recompute = with_mask;

  std::vector<float> activation(size_t(M * C)), expected_activation(size_t(M * C));
  std::fill(with_mask.mask.begin(), with_mask.mask.end(), uint8_t(0));
  int64_t cut = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c) {
      const float z = test::prologue_z(bn.in.x[m * C + c], scale[c], shift[c]);
      expected_activation[m * C + c] = std::max(z, 0.0f);
      if (z > 0.0f)
        with_mask.mask[size_t(m * ((C + 7) / 8) + c / 8)] |= uint8_t(1u << (c % 8));
      else
        ++cut;
    }
  CHECK(cut > M * C / 5);
  CHECK(cut < M * C * 4 / 5);
  bn_backward_cpu(bn.shape, with_mask.backward());
  bn_backward_recompute_cpu(bn.shape, recompute.backward(), scale.data(), shift.data(), activation.data());
  CHECK(recompute.dx == with_mask.dx);
  CHECK(recompute.dgamma == with_mask.dgamma);
  CHECK(recompute.dbeta == with_mask.dbeta);
  CHECK(activation == expected_activation);
}

TEST_CASE("batch norm plans before a fused convolution: the training passes' grids, a ReLU without the residual",
          "[kernels]") {
  const BatchNormShape shape{256 * 32 * 32, 64, BatchNormFusion{true, false}};
  const int64_t tensor = shape.rows * 64 * 2, mask = shape.rows * 64 / 8;
  for (BatchNormLaunch launch : {BatchNormLaunch::cooperative, BatchNormLaunch::split}) {
    INFO((launch == BatchNormLaunch::split ? "split" : "cooperative"));
    const BatchNormPlan train = bn_plan(BatchNormPass::forward_train, shape, 2, kH200, launch);
    const BatchNormPlan statistics = bn_plan(BatchNormPass::forward_statistics, shape, 2, kH200, launch);
    const BatchNormPlan backward = bn_plan(BatchNormPass::backward, shape, 2, kH200, launch);
    const BatchNormPlan recompute = bn_plan(BatchNormPass::backward_recompute, shape, 2, kH200, launch);
    // The same grids write the same partials, merged in the same order.
    CHECK((statistics.grid.x == train.grid.x && statistics.grid.y == train.grid.y));
    CHECK((statistics.block.x == train.block.x && statistics.block.y == train.block.y));
    CHECK(statistics.partial_floats == train.partial_floats);
    CHECK((recompute.grid.x == backward.grid.x && recompute.grid.y == backward.grid.y));
    CHECK((recompute.block.x == backward.block.x && recompute.block.y == backward.block.y));
    CHECK(recompute.partial_floats == backward.partial_floats);
    CHECK(recompute.cached_rows == backward.cached_rows);
    // The statistics read x once and write no tensor; the recompute reads x and dy, no mask, and
    // writes dx and the activation.
    const int64_t small = 64 * int64_t(std::max(train.grid.y, train.apply_grid.y)) * 64 + train.partial_floats * 8;
    CHECK(statistics.cached_rows == 0);
    CHECK(statistics.apply_bytes_read == 0);
    CHECK(statistics.bytes_read >= tensor);
    CHECK(statistics.bytes_read <= tensor + small);
    CHECK(statistics.bytes_written <= small);
    CHECK(recompute.bytes_written >= 2 * tensor);
    CHECK(recompute.bytes_written <= 2 * tensor + small);
    CHECK(recompute.bytes_read - recompute.apply_bytes_read >= 2 * tensor);
    CHECK(recompute.bytes_read + mask <= backward.bytes_read + small);
  }
  for (BatchNormPass pass : {BatchNormPass::forward_statistics, BatchNormPass::backward_recompute})
    for (BatchNormFusion fusion : {BatchNormFusion{false, false}, BatchNormFusion{true, true}})
      CHECK_THROWS_WITH(bn_plan(pass, BatchNormShape{1000, 64, fusion}, 2, kH200),
                        Catch::Contains("before a fused convolution, a ReLU without the residual"));
}
