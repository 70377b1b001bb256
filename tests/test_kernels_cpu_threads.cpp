// The CPU kernels on one thread and on several give the same bits (Note [Fixed work split]): the
// convolution's three passes, with shapes of several pieces and filter-gradient partials, batch norm's
// training forward and backward with every fusion, and SGD over segments of several blocks.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/base/cpu_threads.h"
#include "kernels/batchnorm.h"
#include "kernels/conv2d_cpu.h"
#include "kernels/sgd.h"
#include "tests/batchnorm_buffers.h"
#include "tests/gradcheck.h"

using namespace cutrain;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The outputs of `run` on one thread and on `threads`, the thread count restored after.
std::pair<std::vector<float>, std::vector<float>> on_one_and_many(int threads,
                                                                  const std::function<std::vector<float>()>& run) {
  const int before = cpu_threads();
  set_cpu_threads(1);
  std::vector<float> one = run();
  set_cpu_threads(threads);
  std::vector<float> many = run();
  set_cpu_threads(before);
  return {one, many};
}

}  // namespace

TEST_CASE("CPU threads: a convolution's three passes give the same bits on 1 and on 3 threads", "[kernels]") {
  // Each shape is several pieces (Note [Convolution pieces]): 40 images are 13 pieces of 3 and a last
  // of 1 for the forward and the data gradient, and 4 of 10 for the filter gradient, whose partials
  // are summed.
  const ConvShape shape = GENERATE(ConvShape{40, 8, 8, 64, 32, 3, 3, 1, 1}, ConvShape{40, 16, 16, 64, 16, 3, 3, 2, 1},
                                   ConvShape{40, 32, 32, 64, 16, 1, 1, 1, 0}, ConvShape{40, 32, 32, 64, 16, 1, 1, 2, 0});
  CAPTURE(shape.H, shape.C, shape.K, shape.R, shape.stride);
  std::mt19937 rng(3);
  const std::vector<float> x = test::random_vector(size_t(shape.N) * shape.H * shape.W * shape.C, rng),
                           w = test::random_vector(size_t(shape.K) * shape.R * shape.S * shape.C, rng),
                           dy = test::random_vector(size_t(shape.N) * shape.P() * shape.Q() * shape.K, rng),
                           dx0 = test::random_vector(x.size(), rng), dw0 = test::random_vector(w.size(), rng);
  auto [y1, y3] = on_one_and_many(3, [&] {
    std::vector<float> y(dy.size());
    conv2d_forward_cpu(x.data(), w.data(), shape, y.data());
    return y;
  });
  CHECK(same_bits(y1, y3));
  auto [dx1, dx3] = on_one_and_many(3, [&] {
    std::vector<float> dx = dx0;  // beta = 1: the gradient accumulates into what is there
    conv2d_backward_data_cpu(dy.data(), w.data(), shape, 1.0f, dx.data());
    return dx;
  });
  CHECK(same_bits(dx1, dx3));
  auto [dw1, dw3] = on_one_and_many(3, [&] {
    std::vector<float> dw = dw0;
    conv2d_backward_filter_cpu(x.data(), dy.data(), shape, 1.0f, dw.data());
    return dw;
  });
  CHECK(same_bits(dw1, dw3));
}

TEST_CASE("CPU threads: batch norm's training forward and backward give the same bits on 1 and on 3 threads",
          "[kernels]") {
  // 1,000 rows of 40 channels are 32 blocks of sums in 3 pieces of rows (batchnorm.cpp).
  const BatchNormFusion fusion = GENERATE(BatchNormFusion{false, false}, BatchNormFusion{true, false},
                                          BatchNormFusion{true, true});
  const BatchNormShape shape{1000, 40, fusion};
  std::mt19937 rng(5);
  test::BatchNormInputs in;
  in.x = test::random_vector(40000, rng, -1.0f, 2.0f);
  in.residual = test::random_vector(40000, rng);
  in.dy = test::random_vector(40000, rng);
  in.gamma = test::random_vector(40, rng, 0.5f, 1.5f);
  in.beta = test::random_vector(40, rng, -0.5f, 0.5f);
  in.running_mean = test::random_vector(40, rng);
  in.running_var = test::random_vector(40, rng, 0.5f, 2.0f);
  auto [one, many] = on_one_and_many(3, [&] {
    test::HostBatchNorm o(shape, in);
    bn_forward_train_cpu(shape, o.forward());
    bn_backward_cpu(shape, o.backward());
    std::vector<float> all;
    for (const std::vector<float>* v : {&o.y, &o.mean, &o.invstd, &o.running_mean, &o.running_var, &o.dx,
                                        &o.d_residual, &o.dgamma, &o.dbeta})
      all.insert(all.end(), v->begin(), v->end());
    for (uint8_t byte : o.mask) all.push_back(float(byte));
    return all;
  });
  CHECK(same_bits(one, many));
}

TEST_CASE("CPU threads: SGD gives the same bits on 1 and on 3 threads", "[kernels]") {
  std::mt19937 rng(7);
  const std::vector<float> param0 = test::random_vector(100000, rng), momentum0 = test::random_vector(100000, rng);
  std::vector<float> grad = test::random_vector(100000, rng);
  SgdSegment segments[2];
  segments[0].numel = 70000;
  segments[0].grad.data = grad.data();
  segments[1].offset = 70000;
  segments[1].numel = 30000;
  segments[1].grad.data = grad.data() + 70000;
  const float lr = 0.1f;
  auto [one, many] = on_one_and_many(3, [&] {
    std::vector<float> param = param0, momentum = momentum0;
    sgd_update_cpu(param.data(), momentum.data(), segments, 2, &lr, SgdConfig{});
    param.insert(param.end(), momentum.begin(), momentum.end());
    return param;
  });
  CHECK(same_bits(one, many));
  CHECK(!same_bits(one, param0));  // the update did something
}

TEST_CASE("CPU threads: a count below one is refused", "[kernels]") {
  CHECK_THROWS_WITH(set_cpu_threads(0), "CPU threads: 0 is not a positive count");
}
